/**
 * Plugin settings (kept in the plugin's data.json by Obsidian) and how the daemon URL is found.
 *
 * The daemon advertises its URL in its data folder (`{port, pid, version, startedAt, url, vault, index}`,
 * never the token; daemon/cairn/discovery.py `write_service_file`): in `service-<index>.json`, one per vault
 * (daemons of several vaults can share a data folder), and in `service.json` (the daemon started last). The plugin
 * takes the record naming its own vault, and believes it only once the daemon proves it serves that vault
 * (discovery.ts). The data folder is `$CAIRN_DATA_DIR`, else platformdirs' `user_data_dir("cairn")`.
 */

/** Cairn's default port (daemon/cairn/config.py `DEFAULT_PORT`): a hint in the settings, never a fallback (another
 * vault's daemon may hold it). */
export const DEFAULT_PORT = 27183;
export const DEFAULT_URL = `http://127.0.0.1:${DEFAULT_PORT}`;
/** The daemon's default top_k (docs/design.md, "Contract" → Retrieval). */
export const DEFAULT_TOP_K = 8;

export interface CairnSettings {
  /** Empty → the URL this vault's daemon advertises in its data folder; none → Cairn isn't running for this vault. */
  daemonUrl: string;
  /** This vault's API token (`cairn plugin install` writes it; `cairn token --vault`). Kept in the plugin data, never logged. */
  token: string;
  /** Results per search / sources per answer, 1..50. */
  topK: number;
  /** Tags the Ask and Search scope starts with (notes carrying any of them; nested tags match). */
  defaultTags: string[];
}

export const DEFAULT_SETTINGS: CairnSettings = { daemonUrl: "", token: "", topK: DEFAULT_TOP_K, defaultTags: [] };

/** Saved data (possibly from an older version, or hand-edited) → complete, valid settings. */
export function normaliseSettings(raw: unknown): CairnSettings {
  const r = (raw && typeof raw === "object" ? raw : {}) as Record<string, unknown>;
  const topK = Number(r.topK);
  return {
    daemonUrl: typeof r.daemonUrl === "string" ? r.daemonUrl.trim() : "",
    token: typeof r.token === "string" ? r.token.trim() : "",
    topK: Number.isInteger(topK) && topK >= 1 && topK <= 50 ? topK : DEFAULT_TOP_K,
    defaultTags: parseTags(Array.isArray(r.defaultTags) ? r.defaultTags.join(",") : String(r.defaultTags ?? "")),
  };
}

/** `"#project, area/sub  x"` → `["project", "area/sub", "x"]` (without `#`, lower-cased, no duplicates). */
export function parseTags(text: string): string[] {
  const out: string[] = [];
  for (const raw of text.split(/[\s,]+/)) {
    const tag = raw.trim().replace(/^#+/, "").toLowerCase();
    if (tag && !out.includes(tag)) out.push(tag);
  }
  return out;
}

/**
 * Where `service.json` may be, most likely first: `$CAIRN_DATA_DIR/service.json`, else platformdirs'
 * user data folder for the app name `cairn` on this platform.
 */
export function serviceFileCandidates(platform: string, env: Record<string, string | undefined>, home: string): string[] {
  const join = (...parts: string[]) => parts.join(platform === "win32" ? "\\" : "/");
  const out: string[] = [];
  if (env.CAIRN_DATA_DIR) out.push(join(env.CAIRN_DATA_DIR, "service.json"));
  if (platform === "darwin") out.push(join(home, "Library", "Application Support", "cairn", "service.json"));
  else if (platform === "win32") {
    const local = env.LOCALAPPDATA || join(home, "AppData", "Local");
    out.push(join(local, "cairn", "cairn", "service.json"));
  } else {
    const xdg = env.XDG_DATA_HOME && env.XDG_DATA_HOME.startsWith("/") ? env.XDG_DATA_HOME : join(home, ".local", "share");
    out.push(join(xdg, "cairn", "service.json"));
  }
  return out;
}

/**
 * The URL in a `service.json` text, when it is an `http://` loopback URL (127.0.0.1, localhost, [::1]);
 * anything else (unreadable JSON, another host) → undefined, so a tampered file cannot send the token elsewhere.
 */
export function urlFromServiceJson(text: string): string | undefined {
  let info: unknown;
  try {
    info = JSON.parse(text);
  } catch {
    return undefined;
  }
  const url = (info as { url?: unknown })?.url;
  if (typeof url !== "string") return undefined;
  return isLoopbackHttpUrl(url) ? url.replace(/\/+$/, "") : undefined;
}

/** A daemon's discovery record: its loopback URL, the vault it serves and its process id (when the record says). */
export interface ServiceInfo {
  url: string;
  vault?: string;
  pid?: number;
}

/** `service.json` or `service-<index>.json`: the names a daemon's discovery record may have. */
export function isServiceFileName(name: string): boolean {
  return /^service(-[^\\/]+)?\.json$/.test(name);
}

/** A discovery record's text → {url, vault?, pid?}, when its URL is loopback http (as {@link urlFromServiceJson}). */
export function serviceInfoFromJson(text: string): ServiceInfo | undefined {
  const url = urlFromServiceJson(text);
  if (!url) return undefined;
  const { vault, pid } = JSON.parse(text) as { vault?: unknown; pid?: unknown };
  return {
    url,
    ...(typeof vault === "string" ? { vault } : {}),
    ...(typeof pid === "number" && Number.isInteger(pid) && pid > 0 ? { pid } : {}),
  };
}

/** A vault path made comparable: NFC (the daemon writes NFC), no trailing separator. */
export function vaultKey(path: string): string {
  return path.normalize("NFC").replace(/[\\/]+$/, "");
}

/**
 * The URL of this vault's daemon among discovery records (`service.json` first): the record naming `vault`
 * whose daemon may still run (`alive(pid)`: a daemon killed with kill -9 leaves its record behind). Never a
 * record naming another vault or none, so the plugin of vault A does not talk to vault B's daemon. Without a
 * `vault` to compare (not the desktop app), the first record.
 */
export function pickServiceUrl(
  records: ServiceInfo[], vault?: string, alive: (pid: number | undefined) => boolean = () => true,
): string | undefined {
  if (vault === undefined) return records[0]?.url;
  const key = vaultKey(vault);
  return records.find((r) => r.vault !== undefined && vaultKey(r.vault) === key && alive(r.pid))?.url;
}

/** True for `http://127.0.0.1:N`, `http://localhost:N`, `http://[::1]:N` (the only hosts Cairn serves on). */
export function isLoopbackHttpUrl(url: string): boolean {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return false;
  }
  if (u.protocol !== "http:") return false;
  const host = u.hostname.toLowerCase();
  return host === "localhost" || host === "[::1]" || host === "::1" || /^127(\.\d{1,3}){3}$/.test(host);
}

/**
 * The URL to use: the one in settings, else the discovered one; `""` when there is neither (Cairn isn't running
 * for this vault). Never {@link DEFAULT_URL} by default: whatever holds that port may serve another vault.
 */
export function effectiveUrl(settings: Pick<CairnSettings, "daemonUrl">, discovered?: string): string {
  return (settings.daemonUrl.trim() || discovered || "").replace(/\/+$/, "");
}
