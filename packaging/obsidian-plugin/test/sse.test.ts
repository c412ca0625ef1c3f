import { describe, expect, it } from "vitest";
import { readSse, SseEvent, SseParser } from "../src/sse";

/** An /ask stream as the daemon writes it (http_api.sse_event), with multi-byte text and a heartbeat. */
const ASK_STREAM =
  'event: token\ndata: {"text":"Sow indoors at 20 °C "}\n\n' +
  ": ping\n\n" +
  'event: token\ndata: {"text":"in March — café 🌱 [1]"}\n\n' +
  'event: sources\ndata: [{"n":1,"filePath":"Garden/Tomatoes.md","symbol":"Tomatoes › Sowing","score":0.02,"lines":[18,22]}]\n\n' +
  'event: done\ndata: {"grounded":false,"notFound":false,"elapsedMs":12.5}\n\n';

const EXPECTED: SseEvent[] = [
  { event: "token", data: '{"text":"Sow indoors at 20 °C "}' },
  { event: "token", data: '{"text":"in March — café 🌱 [1]"}' },
  {
    event: "sources",
    data: '[{"n":1,"filePath":"Garden/Tomatoes.md","symbol":"Tomatoes › Sowing","score":0.02,"lines":[18,22]}]',
  },
  { event: "done", data: '{"grounded":false,"notFound":false,"elapsedMs":12.5}' },
];

function feed(chunks: Uint8Array[]): SseEvent[] {
  const parser = new SseParser();
  const out: SseEvent[] = [];
  for (const c of chunks) out.push(...parser.push(c));
  out.push(...parser.end());
  return out;
}

const bytes = (s: string) => new TextEncoder().encode(s);

describe("SseParser", () => {
  it("parses a whole /ask stream into its events in order", () => {
    expect(feed([bytes(ASK_STREAM)])).toEqual(EXPECTED);
  });

  it("gives the same events wherever one chunk boundary falls, byte by byte (inside UTF-8 characters too)", () => {
    const all = bytes(ASK_STREAM);
    for (let cut = 0; cut <= all.length; cut++) {
      expect(feed([all.slice(0, cut), all.slice(cut)]), `cut at byte ${cut}`).toEqual(EXPECTED);
    }
  });

  it("gives the same events when every byte arrives in its own chunk", () => {
    const all = bytes(ASK_STREAM);
    expect(feed(Array.from(all, (b) => Uint8Array.of(b)))).toEqual(EXPECTED);
  });

  it("emits an event as soon as its blank line arrives, not before", () => {
    const parser = new SseParser();
    expect(parser.push(bytes('event: token\ndata: {"text":"a"}\n'))).toEqual([]);
    expect(parser.push(bytes("\n"))).toEqual([{ event: "token", data: '{"text":"a"}' }]);
  });

  it("accepts CRLF and lone CR line endings, also when CR and LF land in different chunks", () => {
    const crlf = bytes(ASK_STREAM.replace(/\n/g, "\r\n"));
    const cr = bytes(ASK_STREAM.replace(/\n/g, "\r"));
    for (const all of [crlf, cr]) {
      for (let cut = 0; cut <= all.length; cut++) {
        expect(feed([all.slice(0, cut), all.slice(cut)]), `cut at byte ${cut}`).toEqual(EXPECTED);
      }
    }
  });

  it("does not take an empty chunk between CR and LF for a blank line", () => {
    const parser = new SseParser();
    const out = [
      ...parser.push(bytes("data: x\r")),
      ...parser.push(new Uint8Array(0)),
      ...parser.push(bytes("\ndata: y\r\n\r\n")),
    ];
    expect(out).toEqual([{ event: "message", data: "x\ny" }]);
  });

  it("joins multi-line data with newlines and strips one space after the colon", () => {
    expect(feed([bytes("data:a\ndata:  b\ndata\n\n")])).toEqual([{ event: "message", data: "a\n b\n" }]);
  });

  it("ignores comments, unknown fields and frames without data", () => {
    expect(feed([bytes(": connected\n\nretry: 10\nfoo: bar\n\nevent: progress\n\n")])).toEqual([]);
  });

  it("drops a leading byte-order mark and remembers the last id", () => {
    expect(feed([bytes("\uFEFFid: 7\nevent: indexed\ndata: {}\n\n")])).toEqual([{ event: "indexed", data: "{}", id: "7" }]);
  });

  it("drops an event whose closing blank line never came (a cut connection)", () => {
    expect(feed([bytes('event: token\ndata: {"text":"a"}\n\nevent: done\ndata: {"grounded":true}\n')])).toEqual([
      { event: "token", data: '{"text":"a"}' },
    ]);
  });
});

describe("readSse", () => {
  it("yields events from a fetch body stream as the chunks arrive", async () => {
    const all = bytes(ASK_STREAM);
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < all.length; i += 7) controller.enqueue(all.slice(i, i + 7));
        controller.close();
      },
    });
    const got: SseEvent[] = [];
    for await (const ev of readSse(body)) got.push(ev);
    expect(got).toEqual(EXPECTED);
  });

  it("cancels the body when the reader stops early", async () => {
    let cancelled = false;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(bytes('event: token\ndata: {"text":"a"}\n\n'));
      },
      cancel() {
        cancelled = true;
      },
    });
    for await (const ev of readSse(body)) {
      expect(ev.event).toBe("token");
      break;
    }
    expect(cancelled).toBe(true);
  });
});
