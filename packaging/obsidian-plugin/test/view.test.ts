// @vitest-environment happy-dom
// The sidebar view on a stand-in Obsidian (test/obsidian-shim.ts) with a scripted daemon (a fake fetch):
// what the owner sees for each answer and error state.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { Events, WorkspaceLeaf } from "obsidian";
import { CairnClient, FetchLike } from "../src/api";
import { NOT_RUNNING } from "../src/errors";
import { DEFAULT_SETTINGS } from "../src/settings";
import { CairnHost, CairnView, SEARCH_DEBOUNCE_MS } from "../src/view";
import { relevanceHint, relevanceText } from "../src/relevance";

const URL_ = "http://127.0.0.1:27183";
const enc = new TextEncoder();
const STATS = { notes: 17, chunks: 43, vectors: 43, pending: 0, lastIngestedAt: Date.now() / 1000 - 120, indexing: false, errors: [] };
const SOURCES = [
  { n: 1, filePath: "Garden/Tomatoes.md", symbol: "Tomatoes › Sowing and planting", score: 0.0213, lines: [18, 22] },
  { n: 2, filePath: "Garden/Tomatoes.md", symbol: "Tomatoes", score: 0.0209, lines: [7, 9] },
];

const sse = (events: [string, unknown][]) => events.map(([name, data]) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`).join("");

/** A response whose body streams `text`, then ends (or errors, like a dropped connection, with `drop`). */
function stream(text: string, opts: { drop?: boolean; open?: boolean } = {}): Response {
  return new Response(
    new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(enc.encode(text));
        if (!opts.drop && !opts.open) c.close();
      },
      pull(c) {
        // Asked for more once `text` was read: a dropped connection fails here (an error in start would discard `text`).
        if (opts.drop && c.desiredSize !== null && c.desiredSize > 0) c.error(new TypeError("network error"));
      },
    }),
    { status: 200, headers: { "Content-Type": "text/event-stream" } },
  );
}

const json = (body: unknown, status = 200) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

type Route = (url: URL, init?: RequestInit) => Response | Promise<Response>;

interface Mounted {
  view: CairnView;
  host: CairnHost & { openTarget: ReturnType<typeof vi.fn> };
  calls: string[];
  root: HTMLElement;
}

async function mount(routes: Record<string, Route>, opts: { offline?: boolean; events?: Route } = {}): Promise<Mounted> {
  const calls: string[] = [];
  const fetch: FetchLike = async (input, init) => {
    const url = new URL(input);
    calls.push(`${init?.method ?? "GET"} ${url.pathname}`);
    if (opts.offline) throw new TypeError("Failed to fetch");
    if (url.pathname === "/index/stats") return json(STATS);
    if (url.pathname === "/tags") return json({ tags: [{ tag: "garden", count: 7 }, { tag: "kitchen", count: 6 }] });
    if (url.pathname === "/events") return (opts.events ?? (() => stream(": connected\n\n", { open: true })))(url, init);
    const route = routes[url.pathname];
    if (!route) return json({ error: { code: "not_found", message: `no route ${url.pathname}` } }, 404);
    return route(url, init);
  };
  const host = {
    settings: { ...DEFAULT_SETTINGS, token: "t0ken-0123456789abcdef" },
    client: () => new CairnClient({ baseUrl: URL_, token: "t0ken-0123456789abcdef", fetch }),
    daemonUrl: () => URL_,
    openTarget: vi.fn(async () => undefined),
  };
  const workspace = new Events();
  Object.assign(workspace, { getActiveFile: () => null });
  const app = { workspace, vault: {} };
  const root = document.createElement("div");
  document.body.appendChild(root);
  // The stand-in's leaf takes (app, parent element); Obsidian's own constructor is not public.
  const leaf = new (WorkspaceLeaf as unknown as new (app: unknown, parent: HTMLElement) => WorkspaceLeaf)(app, root);
  const view = new CairnView(leaf, host);
  root.appendChild(view.containerEl);
  await view.onOpen();
  return { view, host, calls, root };
}

const $ = (root: HTMLElement, sel: string) => root.querySelector(sel) as HTMLElement;

async function ask(m: Mounted, question: string) {
  ($(m.root, ".cairn-question") as HTMLTextAreaElement).value = question;
  $(m.root, ".cairn-ask-button").click();
}

let mounted: Mounted | null = null;
beforeEach(() => {
  document.body.innerHTML = "";
});
afterEach(async () => {
  await mounted?.view.onClose();
  mounted = null;
  vi.useRealTimers();
});

describe("Ask", () => {
  it("renders the streamed answer with [n] links to known sources; a click opens the source's line", async () => {
    mounted = await mount({
      "/ask": () =>
        stream(
          sse([
            ["token", { text: "Sow in March **indoors** [1]. " }],
            ["token", { text: "Plant out in May [2], water `arr[1]` [7]." }],
            ["sources", SOURCES],
            ["done", { grounded: true, notFound: false, elapsedMs: 420 }],
          ]),
        ),
    });
    await ask(mounted, "When do I sow tomatoes?");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-elapsed").textContent).toBe("Answered in 0.4 s"));
    const answer = $(mounted.root, ".cairn-answer");
    expect(answer.querySelector("strong")?.textContent).toBe("indoors");
    const cites = [...answer.querySelectorAll("a.cairn-cite")].map((a) => a.textContent);
    expect(cites).toEqual(["[1]", "[2]"]); // [7] has no source; `arr[1]` is code
    expect(answer.textContent).toContain("[7]");
    expect(mounted.root.querySelectorAll(".cairn-source")).toHaveLength(2);
    expect($(mounted.root, ".cairn-source").textContent).toContain("Garden/Tomatoes.md › Tomatoes › Sowing and planting");
    (answer.querySelector("a.cairn-cite[data-n='2']") as HTMLElement).click();
    expect(mounted.host.openTarget).toHaveBeenCalledWith({ path: "Garden/Tomatoes.md", line: 6 });
    expect($(mounted.root, ".cairn-banner-ungrounded").hidden).toBe(true);
    expect($(mounted.root, ".cairn-stop-button").hidden).toBe(true);
  });

  it("shows the not-found card and no sources when nothing passed the floor", async () => {
    mounted = await mount({
      "/ask": () =>
        stream(sse([["token", { text: "I couldn't find this in your indexed notes." }], ["sources", []], ["done", { grounded: false, notFound: true, elapsedMs: 9 }]])),
    });
    await ask(mounted, "What is the capital of France?");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-notfound-title")?.textContent).toBe("Not found in your notes"));
    expect(mounted.root.querySelectorAll(".cairn-source")).toHaveLength(0);
    expect($(mounted.root, ".cairn-banner-ungrounded").hidden).toBe(true);
  });

  it("shows the passages banner for grounded:false, the answer's text above its linked sources", async () => {
    mounted = await mount({
      "/ask": () =>
        stream(
          sse([
            ["token", { text: "Plant cloves 5 cm deep. [1]" }],
            ["sources", [{ n: 1, filePath: "Garden/Garlic.md", symbol: "Garlic", score: 0.02, lines: [5, 11] }]],
            ["done", { grounded: false, notFound: false, elapsedMs: 30 }],
          ]),
        ),
    });
    await ask(mounted, "How deep do I plant garlic?");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-banner-ungrounded").hidden).toBe(false));
    expect($(mounted.root, ".cairn-answer").textContent).toBe("Plant cloves 5 cm deep. [1]");
  });

  it("says a weak-evidence answer is no clear answer, in its own banner, not that no model is configured", async () => {
    const lead = "I couldn't find a clear answer in your indexed notes. The closest passages say:";
    mounted = await mount({
      "/ask": () =>
        stream(
          sse([
            ["token", { text: `${lead}\n\n- Slugs hide under boards. [1]` }],
            ["sources", [{ n: 1, cited: true, filePath: "Garden/Pests.md", symbol: "Pests", score: 0.02, relevance: "weak", lines: [3, 6] }]],
            ["done", { grounded: false, notFound: false, weak: true, elapsedMs: 30 }],
          ]),
        ),
    });
    await ask(mounted, "How do I stop slugs eating my lettuce?");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-banner-weak").hidden).toBe(false));
    const banner = $(mounted.root, ".cairn-banner-weak").textContent ?? "";
    expect(banner).toContain("No clear answer in your notes.");
    expect(banner).toContain("closest passages");
    expect(banner).not.toContain("none is configured");
    expect($(mounted.root, ".cairn-answer").textContent).toContain("Slugs hide under boards. [1]");
    expect($(mounted.root, ".cairn-sources").textContent).toContain("Garden/Pests.md");
    expect($(mounted.root, ".cairn-notfound")).toBeNull();
  });

  it("replaces an unusable model answer with the one built from the passages, and says why", async () => {
    const why = "The language model's answer was set aside: it has no sentence, only citations.";
    mounted = await mount({
      "/ask": () =>
        stream(
          sse([
            ["token", { text: "1. [2] 2. [1]" }],
            ["replace", { text: "Plant cloves 5 cm deep. [1]", reason: why }],
            ["sources", [{ n: 1, filePath: "Garden/Garlic.md", symbol: "Garlic", score: 0.02, lines: [5, 11] }]],
            ["done", { grounded: false, notFound: false, elapsedMs: 30, fallback: why }],
          ]),
        ),
    });
    await ask(mounted, "How deep do I plant garlic?");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-banner-ungrounded").hidden).toBe(false));
    expect($(mounted.root, ".cairn-answer").textContent).toBe("Plant cloves 5 cm deep. [1]");
    expect($(mounted.root, ".cairn-banner-ungrounded").textContent).toContain(why);
  });

  it("marks each sentence of a model's answer that no passage it cites supports, and says so in its own banner", async () => {
    const made = "Visit evernote.com/export and click **Export all** [2].";
    const uncited = "Then drag the file onto Obsidian.";
    const text = `Sow tomatoes indoors in March [1]. ${made}\n\n- ${uncited}`;
    mounted = await mount({
      "/ask": () =>
        stream(
          sse([
            ["token", { text }],
            ["sources", SOURCES.map((s) => ({ ...s, cited: true }))],
            ["done", { grounded: false, notFound: false, elapsedMs: 30, unsupported: [{ text: made, cites: [2] }, { text: uncited, cites: [] }] }],
          ]),
        ),
    });
    await ask(mounted, "When do I sow tomatoes?");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-banner-unsupported").hidden).toBe(false));
    const answer = $(mounted.root, ".cairn-answer");
    const marks = Array.from(answer.querySelectorAll<HTMLElement>(".cairn-unsupported"));
    expect(marks.map((m) => m.textContent)).toEqual(["⚠", "⚠"]);
    expect(marks[0].title).toContain("[2]");
    expect(marks[1].title).toContain("cites no passage");
    // each mark right after its sentence, the supported sentence unmarked; the text is the model's, with its links
    expect(answer.textContent).toBe("Sow tomatoes indoors in March [1]. Visit evernote.com/export and click Export all [2].⚠Then drag the file onto Obsidian.⚠");
    expect(answer.querySelectorAll("a.cairn-cite").length).toBe(2);
    const banner = $(mounted.root, ".cairn-banner-unsupported").textContent ?? "";
    expect(banner).toContain("2 sentences, marked ⚠, are not backed by a passage they cite");
    expect(banner).not.toContain("Built from your notes' own sentences");
  });

  it("lists the cited sources under Sources and the others under Also retrieved, each with its relevance in words", async () => {
    const text = "Feed it 1:1:1 on Sundays. [2]";
    mounted = await mount({
      "/ask": () =>
        stream(
          sse([
            ["token", { text }],
            [
              "sources",
              [
                { n: 1, cited: false, filePath: "Kitchen/Sourdough.md", symbol: "Sourdough", score: 0.0213, relevance: "weak", lines: [10, 13] },
                { n: 2, cited: true, filePath: "Kitchen/Sourdough starter.md", symbol: "Feeding", score: 0.0208, relevance: "strong", lines: [10, 16] },
              ],
            ],
            ["done", { grounded: false, notFound: false, elapsedMs: 30 }],
          ]),
        ),
    });
    await ask(mounted, "How do I feed my starter?");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-elapsed")).toBeTruthy());
    const titles = [...mounted.root.querySelectorAll(".cairn-sources .cairn-section-title")].map((e) => e.textContent);
    expect(titles).toEqual(["Sources", "Also retrieved"]);
    const lists = [...mounted.root.querySelectorAll(".cairn-sources ol")].map((ol) =>
      [...ol.querySelectorAll(".cairn-source")].map((li) => li.textContent),
    );
    expect(lists).toEqual([
      ["[2]Kitchen/Sourdough starter.md › Feedinglines 10–16 · strong match"],
      ["[1]Kitchen/Sourdough.md › Sourdoughlines 10–13 · weak match"],
    ]);
    expect($(mounted.root, ".cairn-sources").textContent).not.toContain("score");
    expect($(mounted.root, ".cairn-answer").textContent).toBe("Feed it 1:1:1 on Sundays. [2]");
  });

  it("a daemon that marks no source cited lists them all under Sources", async () => {
    mounted = await mount({
      "/ask": () => stream(sse([["token", { text: "Sow in March [1]." }], ["sources", SOURCES], ["done", { grounded: true, notFound: false, elapsedMs: 5 }]])),
    });
    await ask(mounted, "q");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-elapsed")).toBeTruthy());
    const titles = [...mounted.root.querySelectorAll(".cairn-sources .cairn-section-title")].map((e) => e.textContent);
    expect(titles).toEqual(["Sources"]);
    expect(mounted.root.querySelectorAll(".cairn-source")).toHaveLength(2);
  });

  it("is a conversation: a follow-up sends the earlier turns, both are listed, New conversation clears them", async () => {
    const bodies: Record<string, unknown>[] = [];
    const answers = ["Add a minus sign after the type [1].", "Write the title after the type [1]."];
    mounted = await mount({
      "/ask": (_url, init) => {
        bodies.push(JSON.parse(String(init?.body)));
        const text = answers[(bodies.length - 1) % 2];
        return stream(sse([["token", { text }], ["sources", SOURCES], ["done", { grounded: true, notFound: false, elapsedMs: 5 }]]));
      },
    });
    const turns = () => [...mounted!.root.querySelectorAll(".cairn-turn")] as HTMLElement[];
    const newButton = $(mounted.root, ".cairn-new-conversation");
    expect(newButton.hidden).toBe(true);
    await ask(mounted, "How do I make a callout foldable?");
    await vi.waitFor(() => expect(turns()[0]?.querySelector(".cairn-elapsed")).toBeTruthy());
    expect(($(mounted.root, ".cairn-question") as HTMLTextAreaElement).value).toBe("");
    expect(newButton.hidden).toBe(false);
    await ask(mounted, "and give it a custom title?");
    await vi.waitFor(() => expect(turns()[1]?.querySelector(".cairn-elapsed")).toBeTruthy());
    expect(bodies[0].history).toBeUndefined();
    expect(bodies[1].history).toEqual([{ question: "How do I make a callout foldable?", answer: answers[0] }]);
    expect(turns().map((t) => t.querySelector(".cairn-turn-question")?.textContent)).toEqual(["How do I make a callout foldable?", "and give it a custom title?"]);
    expect(turns().map((t) => t.querySelector(".cairn-answer")?.textContent)).toEqual(answers);
    expect(turns().map((t) => t.querySelectorAll(".cairn-source").length)).toEqual([2, 2]);
    // A citation opens its own turn's source.
    (turns()[1].querySelector("a.cairn-cite[data-n='1']") as HTMLElement).click();
    expect(mounted.host.openTarget).toHaveBeenCalledWith({ path: "Garden/Tomatoes.md", line: 17 });
    newButton.click();
    expect(turns()).toHaveLength(0);
    expect(newButton.hidden).toBe(true);
    await ask(mounted, "How do I embed an image?");
    await vi.waitFor(() => expect(turns()[0]?.querySelector(".cairn-elapsed")).toBeTruthy());
    expect(bodies[2].history).toBeUndefined();
    expect(turns()).toHaveLength(1);
  });

  it("a turn that failed is not sent as history; Retry answers it in place", async () => {
    const bodies: Record<string, unknown>[] = [];
    mounted = await mount({
      "/ask": (_url, init) => {
        bodies.push(JSON.parse(String(init?.body)));
        if (bodies.length === 2) return json({ error: { code: "internal", message: "Internal error." } }, 500);
        return stream(sse([["token", { text: `Answer ${bodies.length} [1].` }], ["sources", SOURCES], ["done", { grounded: true, notFound: false, elapsedMs: 5 }]]));
      },
    });
    const turns = () => [...mounted!.root.querySelectorAll(".cairn-turn")] as HTMLElement[];
    await ask(mounted, "first?");
    await vi.waitFor(() => expect(turns()[0]?.querySelector(".cairn-elapsed")).toBeTruthy());
    await ask(mounted, "and then?");
    const error = await vi.waitFor(() => {
      const el = turns()[1]?.querySelector(".cairn-error-server") as HTMLElement | null;
      expect(el).toBeTruthy();
      return el!;
    });
    (error.querySelector("button.cairn-retry") as HTMLElement).click();
    await vi.waitFor(() => expect(turns()[1].querySelector(".cairn-answer")?.textContent).toBe("Answer 3 [1]."));
    expect(turns()).toHaveLength(2);
    expect(bodies[2].history).toEqual(bodies[1].history); // the retry asks what the failed request asked
    await ask(mounted, "and after that?");
    await vi.waitFor(() => expect(turns()[2]?.querySelector(".cairn-elapsed")).toBeTruthy());
    expect((bodies[3].history as { question: string }[]).map((t) => t.question)).toEqual(["first?", "and then?"]);
  });

  it("a 5xx is shown inline with the daemon's message, and Retry asks again", async () => {
    let n = 0;
    mounted = await mount({
      "/ask": () =>
        ++n === 1
          ? json({ error: { code: "internal", message: "Internal error in the Cairn daemon; see its log for details." } }, 500)
          : stream(sse([["token", { text: "Now it works [1]." }], ["sources", SOURCES], ["done", { grounded: true, notFound: false, elapsedMs: 5 }]])),
    });
    await ask(mounted, "q");
    const error = await vi.waitFor(() => {
      const el = $(mounted!.root, ".cairn-pane-ask .cairn-error-server");
      expect(el).toBeTruthy();
      return el;
    });
    expect(error.textContent).toContain("Cairn hit a problem (HTTP 500)");
    expect(error.textContent).toContain("see its log for details");
    (error.querySelector("button.cairn-retry") as HTMLElement).click();
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-answer").textContent).toBe("Now it works [1]."));
    expect($(mounted.root, ".cairn-pane-ask .cairn-error").hidden).toBe(true);
  });

  it("a connection dropped mid-answer keeps what arrived and says the connection was lost", async () => {
    mounted = await mount({ "/ask": () => stream(sse([["token", { text: "Half of the ans" }]]), { drop: true }) });
    await ask(mounted, "q");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-error-network")?.textContent).toContain("Lost the connection to Cairn"));
    expect($(mounted.root, ".cairn-answer").textContent).toBe("Half of the ans");
    expect($(mounted.root, ".cairn-error-network button.cairn-retry")).toBeTruthy();
  });

  it("an error event inside the stream is shown next to the partial answer", async () => {
    mounted = await mount({
      "/ask": () =>
        stream(
          sse([
            ["token", { text: "Plant garlic" }],
            ["error", { code: "llm_error", message: "The language model stopped before the answer was complete." }],
            ["sources", SOURCES],
            ["done", { grounded: false, notFound: false, elapsedMs: 12 }],
          ]),
        ),
    });
    await ask(mounted, "q");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-pane-ask .cairn-error")?.hidden).toBe(false));
    expect($(mounted.root, ".cairn-pane-ask .cairn-error").textContent).toContain("The language model stopped");
    expect($(mounted.root, ".cairn-answer").textContent).toBe("Plant garlic");
  });
});

describe("errors everywhere", () => {
  it("with nothing listening every tab and the status line say Cairn isn't running", async () => {
    mounted = await mount({}, { offline: true });
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-status").textContent).toBe(NOT_RUNNING));
    await ask(mounted, "q");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-pane-ask .cairn-error-offline")).toBeTruthy());
    const box = $(mounted.root, ".cairn-pane-ask .cairn-error-offline");
    expect(box.textContent).toContain(NOT_RUNNING);
    expect(box.textContent).toContain(`Nothing answered at ${URL_}.`);
    expect(box.querySelector("button.cairn-retry")).toBeTruthy();
  });

  it("a rejected token says to give this vault its token with cairn plugin install", async () => {
    mounted = await mount({ "/search": () => json({ error: { code: "unauthorized", message: "Missing or wrong API token" } }, 401) });
    $(mounted.root, ".cairn-tab[data-tab='search']").click();
    const input = $(mounted.root, ".cairn-search-input") as HTMLInputElement;
    input.value = "tomatoes";
    input.dispatchEvent(new Event("input"));
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-search-results .cairn-error-unauthorized")).toBeTruthy(), { timeout: 3000 });
    expect($(mounted.root, ".cairn-search-results").textContent).toContain("run `cairn plugin install --vault");
    expect(mounted.root.textContent).not.toContain("t0ken-0123456789abcdef");
  });
});

describe("Search", () => {
  it("waits for a pause in typing: five quick keystrokes send one request", async () => {
    vi.useFakeTimers();
    mounted = await mount({
      "/search": (url) =>
        json({ results: [{ filePath: "Kitchen/Sourdough.md", symbol: "Sourdough", score: 0.02, snippet: `About ${url.searchParams.get("q")}`, lines: [10, 13] }] }),
    });
    $(mounted.root, ".cairn-tab[data-tab='search']").click();
    const searches = () => mounted!.calls.filter((c) => c.endsWith("/search")).length;
    const opened = searches(); // the recent notes the empty box shows
    const input = $(mounted.root, ".cairn-search-input") as HTMLInputElement;
    for (const q of ["s", "so", "sou", "sour", "sourd"]) {
      input.value = q;
      input.dispatchEvent(new Event("input"));
      await vi.advanceTimersByTimeAsync(SEARCH_DEBOUNCE_MS / 2);
    }
    expect(searches()).toBe(opened);
    await vi.advanceTimersByTimeAsync(SEARCH_DEBOUNCE_MS);
    expect(searches()).toBe(opened + 1);
    vi.useRealTimers();
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-result-snippet mark")?.textContent).toBe("sourd"));
    ($(mounted.root, ".cairn-result-title") as HTMLElement).click();
    expect(mounted.host.openTarget).toHaveBeenCalledWith({ path: "Kitchen/Sourdough.md", line: 9 });
  });
});

describe("recent notes", () => {
  const NOW = Date.now() / 1000;
  const RECENT = [
    { filePath: "Garden/Compost.md", title: "Compost", symbol: "Compost", snippet: "# Compost Turn the heap every two weeks.", modifiedAt: NOW - 300, lines: [1, 3] },
    { filePath: "Inbox.md", title: "Inbox", symbol: "Inbox", snippet: "", modifiedAt: NOW - 3 * 86400 },
  ];
  /** A daemon that lists RECENT for a search without `q` (only within the tag `kitchen`: the second note) and ranks otherwise. */
  const routes = (asked: URLSearchParams[]) => ({
    "/search": (url: URL) => {
      asked.push(url.searchParams);
      if (url.searchParams.has("q")) return json({ results: [{ filePath: "Kitchen/Bread.md", symbol: "Bread", score: 0.02, relevance: "good", snippet: "bread", lines: [1, 2] }] });
      const tagged = url.searchParams.getAll("tag").includes("kitchen");
      return json({ results: tagged ? [] : RECENT, recent: true, coverage: { notes: 2, embedded: 2, pending: 0 } });
    },
  });

  it("with the box empty the Search tab lists the most recently modified notes, newest first; a click opens the note", async () => {
    const asked: URLSearchParams[] = [];
    mounted = await mount(routes(asked));
    $(mounted.root, ".cairn-tab[data-tab='search']").click();
    await vi.waitFor(() => expect(mounted!.root.querySelectorAll(".cairn-recent")).toHaveLength(2));
    expect(asked[0].has("q")).toBe(false);
    expect($(mounted.root, ".cairn-recent-heading").textContent).toBe("Recently modified");
    const titles = [...mounted.root.querySelectorAll(".cairn-recent-title")].map((e) => e.textContent);
    expect(titles).toEqual(["Compost", "Inbox"]);
    const metas = [...mounted.root.querySelectorAll(".cairn-recent-meta")].map((e) => e.textContent);
    expect(metas).toEqual(["Garden/ · 5 min ago", "3 days ago"]);
    const snippets = [...mounted.root.querySelectorAll(".cairn-recent-snippet")].map((e) => e.textContent);
    expect(snippets).toEqual(["Turn the heap every two weeks."]); // the heading repeating the title is left out
    expect(mounted.root.querySelectorAll(".cairn-result")).toHaveLength(0);
    ($(mounted.root, ".cairn-recent-title") as HTMLElement).click();
    expect(mounted.host.openTarget).toHaveBeenCalledWith({ path: "Garden/Compost.md" });
  });

  it("typing searches; one letter or a cleared box brings the recent notes back; the tag scope applies to them", async () => {
    const asked: URLSearchParams[] = [];
    mounted = await mount(routes(asked));
    $(mounted.root, ".cairn-tab[data-tab='search']").click();
    await vi.waitFor(() => expect(mounted!.root.querySelectorAll(".cairn-recent")).toHaveLength(2));
    const input = $(mounted.root, ".cairn-search-input") as HTMLInputElement;
    input.value = "bread";
    input.dispatchEvent(new Event("input"));
    await vi.waitFor(() => expect(mounted!.root.querySelectorAll(".cairn-result")).toHaveLength(1), { timeout: 3000 });
    expect(mounted.root.querySelectorAll(".cairn-recent")).toHaveLength(0);
    input.value = "b";
    input.dispatchEvent(new Event("input"));
    await vi.waitFor(() => expect(mounted!.root.querySelectorAll(".cairn-recent")).toHaveLength(2), { timeout: 3000 });
    expect(asked.at(-1)!.has("q")).toBe(false);
    const select = $(mounted.root, ".cairn-scope-select") as HTMLSelectElement;
    await vi.waitFor(() => expect(select.querySelector("option[value='kitchen']")).toBeTruthy());
    select.value = "kitchen";
    select.dispatchEvent(new Event("change"));
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-search-results .cairn-empty")?.textContent).toBe("No note carries the tags in the scope."));
    expect(asked.at(-1)!.getAll("tag")).toEqual(["kitchen"]);
  });

  it("the list follows the index: an indexed event brings it again", async () => {
    const asked: URLSearchParams[] = [];
    let send: ((text: string) => void) | null = null;
    mounted = await mount(routes(asked), {
      events: () =>
        new Response(
          new ReadableStream<Uint8Array>({
            start(c) {
              c.enqueue(enc.encode(": connected\n\n"));
              send = (text) => c.enqueue(enc.encode(text));
            },
          }),
          { status: 200, headers: { "Content-Type": "text/event-stream" } },
        ),
    });
    $(mounted.root, ".cairn-tab[data-tab='search']").click();
    await vi.waitFor(() => expect(mounted!.root.querySelectorAll(".cairn-recent")).toHaveLength(2));
    const before = asked.length;
    await vi.waitFor(() => expect(send).not.toBeNull());
    send!(sse([["indexed", { added: 0, updated: 1, removed: 0 }]]));
    await vi.waitFor(() => expect(asked.length).toBe(before + 1));
    expect(asked.at(-1)!.has("q")).toBe(false);
  });

  it("says how long ago a note changed in words, then by its date", async () => {
    const { modifiedAgo } = await import("../src/recent");
    const now = Date.UTC(2024, 2, 10, 12, 0, 0);
    const at = (secondsAgo: number) => now / 1000 - secondsAgo;
    expect([10, 90, 7200, 86400 + 60, 4 * 86400].map((s) => modifiedAgo(at(s), now))).toEqual(["just now", "1 min ago", "2 h ago", "yesterday", "4 days ago"]);
    expect(modifiedAgo(at(-3600), now)).toBe("just now"); // a file dated ahead of this clock
    expect(modifiedAgo(at(30 * 86400), now)).toMatch(/^2024-02-(09|10)$/); // the date, in local time
  });
});

describe("still indexing", () => {
  const hit = { filePath: "Kitchen/Sourdough.md", symbol: "Sourdough", score: 0.02, snippet: "starter", lines: [10, 13] };

  it("search results drawn from an index with pending notes say results may be incomplete; a complete one does not", async () => {
    let pending = 120;
    mounted = await mount({ "/search": () => json({ results: [hit], coverage: { notes: 3879, embedded: 3879 - pending, pending } }) });
    $(mounted.root, ".cairn-tab[data-tab='search']").click();
    const input = $(mounted.root, ".cairn-search-input") as HTMLInputElement;
    input.value = "starter";
    input.dispatchEvent(new Event("input"));
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-search-results .cairn-coverage")).toBeTruthy(), { timeout: 3000 });
    const notice = $(mounted.root, ".cairn-coverage").textContent;
    expect(notice).toContain("Still indexing: results may be incomplete");
    expect(notice).toContain("120 of 3,879 notes are not yet searchable by meaning");
    expect(mounted.root.querySelectorAll(".cairn-result")).toHaveLength(1);

    pending = 0;
    input.value = "starters";
    input.dispatchEvent(new Event("input"));
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-result-snippet mark")?.textContent).toBe("starter"), { timeout: 3000 });
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-coverage")).toBeNull(), { timeout: 3000 });
  });

  it("an answer whose done event reports pending notes says results may be incomplete", async () => {
    mounted = await mount({
      "/ask": () =>
        stream(sse([["token", { text: "Feed it [1]." }], ["sources", SOURCES], ["done", { grounded: true, notFound: false, elapsedMs: 300, coverage: { notes: 10, embedded: 9, pending: 1 } }]])),
    });
    await ask(mounted, "How do I feed my starter?");
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-elapsed")).toBeTruthy());
    expect($(mounted.root, ".cairn-ask-note .cairn-coverage").textContent).toContain("Still indexing: results may be incomplete. 1 of 10 notes is not yet");
  });
});

describe("relevance in words", () => {
  it("a passage holding the words only in another form reads 'similar words'", () => {
    expect(relevanceText("similar")).toBe("similar words");
    expect(relevanceHint("similar")).toMatch(/another form/);
    expect(relevanceText("keyword")).toBe("exact words");
  });

  it("search results and similar notes say strong / good / exact words / weak, never the raw score", async () => {
    const hit = (filePath: string, relevance: string, score: number) => ({ filePath, symbol: "", score, relevance, snippet: "banneton", lines: [1, 2] });
    mounted = await mount({
      "/search": () =>
        json({ results: [hit("Kitchen/Sourdough.md", "keyword", 0.0323), hit("Kitchen/Bread.md", "good", 0.0161), hit("Home.md", "weak", 0.0159)] }),
      "/related": () =>
        json({ filePath: "Kitchen/Sourdough.md", links: [], backlinks: [], similar: [{ filePath: "Kitchen/Sourdough starter.md", title: "Sourdough starter", score: 0.8123, relevance: "strong" }] }),
    });
    $(mounted.root, ".cairn-tab[data-tab='search']").click();
    const input = $(mounted.root, ".cairn-search-input") as HTMLInputElement;
    input.value = "banneton";
    input.dispatchEvent(new Event("input"));
    await vi.waitFor(() => expect(mounted!.root.querySelectorAll(".cairn-result")).toHaveLength(3), { timeout: 3000 });
    const metas = [...mounted.root.querySelectorAll(".cairn-result-meta")].map((e) => e.textContent);
    expect(metas).toEqual(["lines 1–2 · exact words", "lines 1–2 · good match", "lines 1–2 · weak match"]);
    const label = $(mounted.root, ".cairn-result-meta .cairn-relevance");
    expect(label.classList.contains("cairn-relevance-keyword")).toBe(true);
    expect(label.title).toBe("Holds every word you typed, though not close in meaning");
    expect($(mounted.root, ".cairn-search-results").textContent).not.toMatch(/score|0\.0/);

    Object.assign(mounted.view.app.workspace, { getActiveFile: () => ({ path: "Kitchen/Sourdough.md", extension: "md" }) });
    $(mounted.root, ".cairn-tab[data-tab='related']").click();
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-related-meta")?.textContent).toBe("Kitchen/ · strong match"));
    expect($(mounted.root, ".cairn-related").textContent).not.toContain("0.81");
  });
});

describe("status line", () => {
  it("shows index progress from /events, then the counts when the run ends", async () => {
    mounted = await mount({}, {
      events: () => stream(": connected\n\n" + sse([["progress", { phase: "index", done: 812, total: 3879 }]]), { open: true }),
    });
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-status").textContent).toBe("Indexing 812 / 3,879"));
  });

  it("says the daemon is stopping (not an indexing problem) when /events ends with shutting_down", async () => {
    const stopping = { code: "shutting_down", message: "The Cairn daemon is stopping." };
    mounted = await mount({}, { events: () => stream(": connected\n\n" + sse([["error", stopping]]), { open: true }) });
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-status").textContent).toBe("The Cairn daemon is stopping."));
  });

  it("shows the counts from /index/stats", async () => {
    mounted = await mount({});
    await vi.waitFor(() => expect($(mounted!.root, ".cairn-status").textContent).toBe("17 notes · 43 chunks indexed · updated 2 min ago"));
  });
});
