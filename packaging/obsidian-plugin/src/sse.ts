/**
 * An incremental Server-Sent Events parser (the WHATWG "event stream interpretation" rules),
 * fed with whatever byte chunks `fetch` hands over.
 *
 * Chunks may split anything: a multi-byte UTF-8 character, a `\r\n` pair, a field name, a frame.
 * The parser keeps the unfinished tail and emits an event only once its blank line has arrived.
 *
 * Rules followed (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
 * - lines end with `\r\n`, `\n` or `\r`; a leading BOM is dropped;
 * - `:` starts a comment (the daemon's `: ping` heartbeats), ignored;
 * - `field: value` — one space after the colon is stripped; a line without a colon is a field with
 *   an empty value; `data` lines are joined with `\n`; `event` names the event (default `message`);
 * - a blank line dispatches the event; an event whose data buffer is empty is not dispatched;
 * - an unfinished event at the end of the stream is dropped (`end()` returns nothing for it).
 */

/** One dispatched event: `event` is its name (`message` when the frame had no `event:` line). */
export interface SseEvent {
  event: string;
  data: string;
  id?: string;
}

export class SseParser {
  private readonly decoder = new TextDecoder("utf-8");
  private buffer = "";
  /** The previous chunk ended with `\r`: a `\n` at the start of the next one belongs to it. */
  private pendingCR = false;
  private sawFirst = false;
  private eventName = "";
  private dataLines: string[] = [];
  private hasData = false;
  private lastId: string | undefined;

  /** Feed a chunk (bytes from the network, or already-decoded text); returns the events it completed. */
  push(chunk: Uint8Array | string): SseEvent[] {
    let text = typeof chunk === "string" ? chunk : this.decoder.decode(chunk, { stream: true });
    if (!this.sawFirst && text.length > 0) {
      this.sawFirst = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (text.length === 0) return [];
    if (this.pendingCR && text.startsWith("\n")) text = text.slice(1);
    this.pendingCR = false;
    this.buffer += text;
    const out: SseEvent[] = [];
    let start = 0;
    for (let i = 0; i < this.buffer.length; i++) {
      const ch = this.buffer.charCodeAt(i);
      if (ch !== 10 && ch !== 13) continue;
      const line = this.buffer.slice(start, i);
      if (ch === 13) {
        if (i + 1 < this.buffer.length) {
          if (this.buffer.charCodeAt(i + 1) === 10) i++;
        } else {
          this.pendingCR = true;
        }
      }
      start = i + 1;
      const event = this.line(line);
      if (event) out.push(event);
    }
    this.buffer = this.buffer.slice(start);
    return out;
  }

  /** The stream ended: flush the decoder. An event without its closing blank line is discarded (per spec). */
  end(): SseEvent[] {
    const rest = this.decoder.decode();
    const out = rest ? this.push(rest) : [];
    this.buffer = "";
    this.eventName = "";
    this.dataLines = [];
    this.hasData = false;
    return out;
  }

  private line(line: string): SseEvent | null {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    let field = line;
    let value = "";
    if (colon >= 0) {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
    }
    switch (field) {
      case "event":
        this.eventName = value;
        break;
      case "data":
        this.dataLines.push(value);
        this.hasData = true;
        break;
      case "id":
        if (!value.includes("\0")) this.lastId = value;
        break;
      default: // `retry` and unknown fields: nothing the plugin uses
        break;
    }
    return null;
  }

  private dispatch(): SseEvent | null {
    const name = this.eventName || "message";
    const hasData = this.hasData;
    const data = this.dataLines.join("\n");
    this.eventName = "";
    this.dataLines = [];
    this.hasData = false;
    if (!hasData) return null;
    const event: SseEvent = { event: name, data };
    if (this.lastId !== undefined) event.id = this.lastId;
    return event;
  }
}

/**
 * Read a `fetch` response body as SSE events, yielding each as soon as its frame is complete.
 * Throws whatever the reader throws (an `AbortError` after Stop, a `TypeError` when the
 * connection drops).
 */
export async function* readSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const parser = new SseParser();
  const reader = body.getReader();
  let finished = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (value) yield* parser.push(value);
    }
    finished = true;
    yield* parser.end();
  } finally {
    if (!finished) {
      // The consumer stopped early (Stop, or it has what it needs): close the connection.
      await reader.cancel().catch(() => undefined);
    }
    try {
      reader.releaseLock();
    } catch {
      /* the stream is already gone */
    }
  }
}
