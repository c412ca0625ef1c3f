import { describe, expect, it } from "vitest";
import {
  DEFAULT_URL, effectiveUrl, isLoopbackHttpUrl, isServiceFileName, normaliseSettings, parseTags, pickServiceUrl,
  serviceFileCandidates, serviceInfoFromJson, urlFromServiceJson,
} from "../src/settings";
import { ago, progressLine, statsLine } from "../src/status";

describe("settings", () => {
  it("defaults to the daemon's port 27183 and top_k 8", () => {
    expect(DEFAULT_URL).toBe("http://127.0.0.1:27183");
    expect(normaliseSettings(undefined)).toEqual({ daemonUrl: "", token: "", topK: 8, defaultTags: [] });
  });

  it("repairs bad saved values instead of failing", () => {
    expect(normaliseSettings({ topK: 500, token: "  abc  ", defaultTags: ["#Garden", "garden", "x/y"] })).toEqual({
      daemonUrl: "",
      token: "abc",
      topK: 8,
      defaultTags: ["garden", "x/y"],
    });
  });

  it("parses a typed tag list", () => {
    expect(parseTags("#Garden, kitchen  area/sub,,")).toEqual(["garden", "kitchen", "area/sub"]);
  });

  it("prefers the URL in settings, then the one this vault's daemon advertises, and never falls back to the default port", () => {
    expect(effectiveUrl({ daemonUrl: "http://localhost:9000/" }, "http://127.0.0.1:5555")).toBe("http://localhost:9000");
    expect(effectiveUrl({ daemonUrl: "" }, "http://127.0.0.1:5555")).toBe("http://127.0.0.1:5555");
    expect(effectiveUrl({ daemonUrl: "" })).toBe(""); // another vault's daemon may hold 27183
  });

  it("reads the URL from service.json, refusing anything that is not loopback http", () => {
    expect(urlFromServiceJson('{"port":41234,"pid":9,"url":"http://127.0.0.1:41234"}')).toBe("http://127.0.0.1:41234");
    expect(urlFromServiceJson('{"url":"http://evil.example:80"}')).toBeUndefined();
    expect(urlFromServiceJson('{"url":"https://127.0.0.1:1"}')).toBeUndefined();
    expect(urlFromServiceJson("not json")).toBeUndefined();
    expect(isLoopbackHttpUrl("http://[::1]:27183")).toBe(true);
    expect(isLoopbackHttpUrl("http://127.0.0.1.evil.example")).toBe(false);
  });

  it("connects to its own vault's daemon when daemons of two vaults share the data folder", () => {
    const a = serviceInfoFromJson('{"url":"http://127.0.0.1:4001","pid":1,"vault":"/v/A","index":"A-1"}')!;
    const b = serviceInfoFromJson('{"url":"http://127.0.0.1:4002","pid":2,"vault":"/v/B","index":"B-2"}')!;
    expect(a).toEqual({ url: "http://127.0.0.1:4001", vault: "/v/A", pid: 1 });
    // service.json (listed first) is B's, the daemon started last: vault A still gets A's daemon.
    expect(pickServiceUrl([b, a, b], "/v/A")).toBe("http://127.0.0.1:4001");
    expect(pickServiceUrl([b, b], "/v/A/")).toBeUndefined(); // A's daemon is not running: never B's
    expect(pickServiceUrl([b, a], "/v/Cafe\u0301")).toBeUndefined();
    const nfc = { url: "http://127.0.0.1:4003", vault: "/v/Caf\u00e9" };
    expect(pickServiceUrl([nfc], "/v/Cafe\u0301")).toBe("http://127.0.0.1:4003"); // the daemon writes NFC
    // A record naming no vault cannot say whose it is: never used; without a vault path, the first record.
    expect(pickServiceUrl([{ url: "http://127.0.0.1:27183" }], "/v/A")).toBeUndefined();
    expect(pickServiceUrl([b, a])).toBe("http://127.0.0.1:4002");
    // A record whose process is gone (kill -9 leaves it) is stale: not used.
    expect(pickServiceUrl([b, a], "/v/A", (pid) => pid !== 1)).toBeUndefined();
    expect(pickServiceUrl([b, a], "/v/B", (pid) => pid !== 1)).toBe("http://127.0.0.1:4002");
    expect(["service.json", "service-A-22319a9d6f201c3f.json", "service-Café-1.json", ".service.12.tmp", "service-x.json.bak"].filter(isServiceFileName))
      .toEqual(["service.json", "service-A-22319a9d6f201c3f.json", "service-Café-1.json"]);
  });

  it("looks for service.json in CAIRN_DATA_DIR first, then platformdirs' data folder", () => {
    expect(serviceFileCandidates("linux", { CAIRN_DATA_DIR: "/tmp/d" }, "/home/a")).toEqual([
      "/tmp/d/service.json",
      "/home/a/.local/share/cairn/service.json",
    ]);
    expect(serviceFileCandidates("linux", { XDG_DATA_HOME: "/x" }, "/home/a")).toEqual(["/x/cairn/service.json"]);
    expect(serviceFileCandidates("darwin", {}, "/Users/a")).toEqual(["/Users/a/Library/Application Support/cairn/service.json"]);
    expect(serviceFileCandidates("win32", { LOCALAPPDATA: "C:\\Users\\a\\AppData\\Local" }, "C:\\Users\\a")).toEqual([
      "C:\\Users\\a\\AppData\\Local\\cairn\\cairn\\service.json",
    ]);
  });
});

describe("status line", () => {
  it("shows indexing progress with thousands separators", () => {
    expect(progressLine({ phase: "index", done: 812, total: 3879 })).toBe("Indexing 812 / 3,879");
    expect(progressLine({ phase: "embed", done: 1200, total: 19573 })).toBe("Embedding 1,200 / 19,573");
    expect(progressLine({ phase: "pdf", done: 2, total: 14 })).toBe("Reading PDFs 2 / 14");
  });

  it("summarises the stats, with what is pending and when it was updated", () => {
    const now = 1_700_000_000;
    expect(statsLine({ notes: 17, chunks: 80, vectors: 80, pending: 0, lastIngestedAt: now - 300, errors: [] }, now)).toBe(
      "17 notes · 80 chunks indexed · updated 5 min ago",
    );
    expect(statsLine({ notes: 1, chunks: 2, vectors: 0, pending: 2, lastIngestedAt: null, paused: true }, now)).toBe(
      "1 note · 2 chunks indexed · 2 pending · paused · never indexed",
    );
    expect(ago(now - 2 * 86400, now)).toBe("2 days ago");
  });
});
