import { describe, expect, it } from "vitest";
import { CairnClient, FetchLike, HISTORY_ANSWER_CHARS, HISTORY_TURNS } from "../src/api";
import { CairnError, describeError, NOT_RUNNING, TOKEN_REJECTED } from "../src/errors";

const TOKEN = "s3cret-token-abcdefghijklmnop";
const enc = new TextEncoder();

function sseResponse(chunks: string[], opts: { close?: boolean } = {}): Response {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const c of chunks) controller.enqueue(enc.encode(c));
      if (opts.close !== false) controller.close();
    },
  });
  return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
}

const jsonError = (status: number, code: string, message: string) =>
  new Response(JSON.stringify({ error: { code, message } }), { status, headers: { "Content-Type": "application/json" } });

interface Call {
  url: string;
  init?: RequestInit;
}

function client(respond: (call: Call) => Response | Promise<Response>, extra: Partial<ConstructorParameters<typeof CairnClient>[0]> = {}) {
  const calls: Call[] = [];
  const fetch: FetchLike = async (url, init) => {
    const call = { url, init };
    calls.push(call);
    return respond(call);
  };
  return { calls, client: new CairnClient({ baseUrl: "http://127.0.0.1:27183/", token: TOKEN, fetch, ...extra }) };
}

async function failure(p: Promise<unknown>): Promise<CairnError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(CairnError);
    return err as CairnError;
  }
  throw new Error("expected the call to fail");
}

describe("ask", () => {
  it("streams tokens in order, then the sources, and resolves with done", async () => {
    const stream =
      'event: token\ndata: {"text":"Sow in "}\n\nevent: token\ndata: {"text":"March [1]."}\n\n: ping\n\n' +
      'event: sources\ndata: [{"n":1,"filePath":"Garden/Tomatoes.md","symbol":"Tomatoes","score":0.02,"lines":[7,9]}]\n\n' +
      'event: done\ndata: {"grounded":false,"notFound":false,"elapsedMs":31}\n\n';
    // Split the stream awkwardly: in the middle of an event name and of the JSON.
    const { client: c, calls } = client(() => sseResponse([stream.slice(0, 9), stream.slice(9, 50), stream.slice(50)]));
    const seen: string[] = [];
    const done = await c.ask(
      "When do I sow tomatoes?",
      { onToken: (t) => seen.push(`token:${t}`), onSources: (s) => seen.push(`sources:${s.map((x) => x.n).join(",")}`) },
      { topK: 5, tags: ["garden"] },
    );
    expect(seen).toEqual(["token:Sow in ", "token:March [1].", "sources:1"]);
    expect(done).toEqual({ grounded: false, notFound: false, elapsedMs: 31 });
    expect(calls[0].url).toBe("http://127.0.0.1:27183/ask");
    expect(JSON.parse(String(calls[0].init?.body))).toEqual({ question: "When do I sow tomatoes?", topK: 5, tags: ["garden"] });
    expect((calls[0].init?.headers as Record<string, string>).Authorization).toBe(`Bearer ${TOKEN}`);
  });

  it("sends the earlier turns as history, only the last ones and each answer cut to the daemon's limits", async () => {
    const done = 'event: sources\ndata: []\n\nevent: done\ndata: {"grounded":false,"notFound":true,"elapsedMs":1}\n\n';
    const { client: c, calls } = client(() => sseResponse([done]));
    const turns = Array.from({ length: HISTORY_TURNS + 2 }, (_, i) => ({ question: `q${i}?`, answer: "a".repeat(HISTORY_ANSWER_CHARS + i) }));
    await c.ask("and the title?", {}, { history: turns });
    const body = JSON.parse(String(calls[0].init?.body));
    expect(body.history.map((t: { question: string }) => t.question)).toEqual(turns.slice(2).map((t) => t.question));
    expect(body.history.every((t: { answer: string }) => t.answer.length === HISTORY_ANSWER_CHARS)).toBe(true);
    await c.ask("first?", {}, { history: [] });
    expect(JSON.parse(String(calls[1].init?.body))).toEqual({ question: "first?" });
  });

  it("reports the not-found answer through done.notFound with no sources", async () => {
    const { client: c } = client(() =>
      sseResponse([
        `event: token\ndata: {"text":"I couldn't find this in your indexed notes."}\n\nevent: sources\ndata: []\n\nevent: done\ndata: {"grounded":false,"notFound":true,"elapsedMs":8}\n\n`,
      ]),
    );
    let sources: unknown = null;
    const done = await c.ask("What is the capital of France?", { onSources: (s) => (sources = s) });
    expect(done.notFound).toBe(true);
    expect(sources).toEqual([]);
  });

  it("passes an error event inside the stream to onStreamError and still resolves with done", async () => {
    const { client: c } = client(() =>
      sseResponse([
        'event: token\ndata: {"text":"Partial"}\n\nevent: error\ndata: {"code":"llm_timeout","message":"The language model stopped."}\n\n',
        'event: sources\ndata: []\n\nevent: done\ndata: {"grounded":false,"notFound":false,"elapsedMs":5}\n\n',
      ]),
    );
    const errors: string[] = [];
    await c.ask("q", { onStreamError: (e) => errors.push(`${e.code}: ${e.message}`) });
    expect(errors).toEqual(["llm_timeout: The language model stopped."]);
  });

  it("fails as a dropped connection when the stream ends before done", async () => {
    const { client: c } = client(() => sseResponse(['event: token\ndata: {"text":"Half an ans'], { close: true }));
    const e = await failure(c.ask("q", {}));
    expect(e.kind).toBe("network");
    expect(describeError(e).retry).toBe(true);
  });

  it("Stop aborts the stream and fails as aborted, not as an error", async () => {
    const controller = new AbortController();
    const { client: c } = client((call) => {
      const body = new ReadableStream<Uint8Array>({
        start(ctrl) {
          ctrl.enqueue(enc.encode('event: token\ndata: {"text":"Once "}\n\n'));
          call.init?.signal?.addEventListener("abort", () => ctrl.error(new DOMException("aborted", "AbortError")));
        },
      });
      return new Response(body, { status: 200 });
    });
    const tokens: string[] = [];
    const p = c.ask("q", { onToken: (t) => (tokens.push(t), controller.abort()) }, { signal: controller.signal });
    const e = await failure(p);
    expect(e.kind).toBe("aborted");
    expect(tokens).toEqual(["Once "]);
  });
});

describe("error states", () => {
  it("nothing listening → 'Cairn isn't running' with a retry, naming the URL tried", async () => {
    const { client: c } = client(() => {
      throw new TypeError("Failed to fetch");
    });
    const e = await failure(c.search("tomatoes"));
    expect(e.kind).toBe("offline");
    const shown = describeError(e, c.baseUrl);
    expect(shown.title).toBe(NOT_RUNNING);
    expect(shown.title).toContain("Cairn isn't running for this vault — start it with `cairn serve --vault");
    expect(shown.detail).toContain("http://127.0.0.1:27183");
    expect(shown.retry).toBe(true);
  });

  it("running but refused by the browser (the probe reaches /health) → an Origin hint, not 'not running'", async () => {
    let probed = "";
    const { client: c } = client(
      () => {
        throw new TypeError("Failed to fetch");
      },
      { probe: async (url) => ((probed = url), true) },
    );
    const e = await failure(c.stats());
    expect(probed).toBe("http://127.0.0.1:27183/health");
    expect(e.kind).toBe("blocked");
    expect(describeError(e).detail).toContain("app://obsidian.md");
  });

  it("401 → 'token rejected — run `cairn plugin install --vault`', and the token is never in the message", async () => {
    const { client: c } = client(() => jsonError(401, "unauthorized", "Missing or wrong API token"));
    const e = await failure(c.ask("q", {}));
    expect(e.kind).toBe("unauthorized");
    expect(e.message).toBe(TOKEN_REJECTED);
    const shown = describeError(e);
    expect(shown.title).toMatch(/rejected the token — run `cairn plugin install --vault <this vault's folder>`/);
    expect(JSON.stringify(shown)).not.toContain(TOKEN);
    expect(e.stack ?? "").not.toContain(TOKEN);
  });

  it("5xx shows the daemon's own message inline, with a retry", async () => {
    const { client: c } = client(() => jsonError(503, "unavailable", "Index events is not available in this daemon."));
    const e = await failure(c.tags());
    expect(e.kind).toBe("server");
    const shown = describeError(e);
    expect(shown.title).toContain("HTTP 503");
    expect(shown.detail).toBe("Index events is not available in this daemon.");
    expect(shown.retry).toBe(true);
  });

  it("a 5xx that is not JSON (a proxy page) still shows some text", async () => {
    const { client: c } = client(() => new Response("<h1>Bad gateway</h1>", { status: 502 }));
    const e = await failure(c.stats());
    expect(e.kind).toBe("server");
    expect(describeError(e).detail).toBe("<h1>Bad gateway</h1>");
  });

  it("a 4xx shows the daemon's explanation and keeps the status (404 → note not indexed)", async () => {
    const { client: c } = client(() => jsonError(404, "not_found", "No indexed note 'New.md'."));
    const e = await failure(c.related("New.md"));
    expect(e.kind).toBe("request");
    expect(e.status).toBe(404);
    expect(describeError(e).title).toBe("No indexed note 'New.md'.");
  });

  it("429 asks to wait", async () => {
    const { client: c } = client(() => jsonError(429, "too_many_requests", "Too many wrong API tokens; try again in 2 s."));
    const e = await failure(c.stats());
    expect(e.kind).toBe("throttled");
    expect(describeError(e).title).toMatch(/wait/);
  });

  it("without a token nothing is sent and the owner is told to paste one", async () => {
    const calls: string[] = [];
    const c = new CairnClient({ baseUrl: "http://127.0.0.1:27183", token: " ", fetch: async (url) => (calls.push(url), new Response("{}")) });
    const e = await failure(c.search("x"));
    expect(e.kind).toBe("no-token");
    expect(describeError(e).title).toContain("`cairn plugin install --vault");
    expect(calls).toEqual([]);
  });

  it("with no daemon naming this vault nothing is sent and the sidebar says Cairn isn't running for this vault", async () => {
    const calls: string[] = [];
    const c = new CairnClient({ baseUrl: "", token: TOKEN, fetch: async (url) => (calls.push(url), new Response("{}")) });
    const e = await failure(c.search("x"));
    expect(e.kind).toBe("offline");
    const shown = describeError(e, c.baseUrl);
    expect(shown.title).toBe(NOT_RUNNING);
    expect(shown.detail).toBe("No running Cairn daemon says it serves this vault.");
    expect(calls).toEqual([]);
  });

  it("another vault's daemon at the URL: the token is never sent, and it says Cairn isn't running for this vault", async () => {
    const checked: [string, boolean][] = [];
    const { client: c, calls } = client(() => new Response(JSON.stringify({ results: [{ filePath: "B.md" }] })), {
      check: async (url, again) => {
        checked.push([url, again]);
        throw new CairnError("elsewhere", `The Cairn daemon at ${url} serves another vault.`);
      },
    });
    const e = await failure(c.search("x"));
    expect(e.kind).toBe("elsewhere");
    expect(calls).toEqual([]);
    expect(checked).toEqual([["http://127.0.0.1:27183", false]]);
    const shown = describeError(e, c.baseUrl);
    expect(shown.title).toBe(NOT_RUNNING);
    expect(shown.detail).toBe("The Cairn daemon at http://127.0.0.1:27183 serves another vault.");
  });

  it("a 401 asks again whose daemon it is: one that moved away says not running, not 'token rejected'", async () => {
    const checked: boolean[] = [];
    const { client: c } = client(() => jsonError(401, "unauthorized", "Missing or wrong API token"), {
      check: async (url, again) => {
        checked.push(again);
        if (again) throw new CairnError("elsewhere", `The Cairn daemon at ${url} serves another vault.`);
      },
    });
    const e = await failure(c.tags());
    expect(checked).toEqual([false, true]);
    expect(e.kind).toBe("elsewhere");
  });
});

describe("requests", () => {
  it("search sends q, topK and one tag parameter per tag, and the token only in the header", async () => {
    const { client: c, calls } = client(() => new Response(JSON.stringify({ results: [] })));
    await c.search("sourdough starter", { topK: 3, tags: ["kitchen", "baking/bread"] });
    const url = new URL(calls[0].url);
    expect(url.pathname).toBe("/search");
    expect(url.searchParams.get("q")).toBe("sourdough starter");
    expect(url.searchParams.get("topK")).toBe("3");
    expect(url.searchParams.getAll("tag")).toEqual(["kitchen", "baking/bread"]);
    expect(calls[0].url).not.toContain(TOKEN);
  });

  it("events reports progress and indexed runs from the /events stream", async () => {
    const { client: c } = client(() =>
      sseResponse([
        ": connected\n\nevent: progress\ndata: {\"phase\":\"index\",\"done\":812,\"total\":3879}\n\n",
        "event: indexed\ndata: {\"added\":3}\n\n",
      ]),
    );
    const got: string[] = [];
    await c.events({ onOpen: () => got.push("open"), onProgress: (p) => got.push(`${p.phase} ${p.done}/${p.total}`), onIndexed: (n) => got.push(n) });
    expect(got).toEqual(["open", "index 812/3879", "indexed"]);
  });
});
