// A loopback address of this test process's own, for servers a test will stop and start again
// while an endpoint list (or Envoy's cluster) still names them. Test files run as parallel
// processes that all bind 127.0.0.1; a port freed there can be taken by another file's server
// before we listen again, and traffic meant for "our dead replica" would then reach it. Nobody
// else binds 127.<derived from our pid>, so a port freed on it stays ours. (Linux routes all of
// 127.0.0.0/8 to the loopback interface.)

const base = 100;

/** `127.b.c.d`, unique per process id (pids stay below 2^22 on Linux). */
export function privateLoopbackHost(pid: number = process.pid): string {
  return `127.${base + ((pid >> 16) & 0x7f)}.${(pid >> 8) & 0xff}.${pid & 0xff}`;
}
