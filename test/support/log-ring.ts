// Bounded log capture for child processes: keeps the most recent bytes so a chatty process
// (Envoy at debug level) cannot grow test memory without bound, while the tail that explains a
// failure is kept.

export class LogRing {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private dropped = 0;

  constructor(private readonly capacityBytes = 1024 * 1024) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.size > this.capacityBytes && this.chunks.length > 1) {
      const oldest = this.chunks.shift();
      if (oldest === undefined) break;
      this.size -= oldest.length;
      this.dropped += oldest.length;
    }
  }

  toString(): string {
    const text = Buffer.concat(this.chunks).toString('utf8');
    return this.dropped > 0 ? `[... ${this.dropped} earlier bytes dropped ...]\n${text}` : text;
  }
}
