// The bare-Node floor of `npm run bench`'s memory table: a process that loads nothing and waits
// (with the same memory probe as the servers), so llm-extproc's figures sit beside Node's own.
setInterval(() => {}, 1 << 30);
process.stdout.write('idle\n');
