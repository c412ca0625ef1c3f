// A minimal stand-in for the Obsidian API — only what the Cairn plugin uses — so the built main.js
// runs in a plain browser page (tests/test_plugin_e2e.py). It is not Obsidian: Markdown rendering is a
// small subset, the workspace has one note pane and one sidebar leaf, and opening a note just records
// where it would open (window.__opened) and shows it in the note pane.
(function () {
  "use strict";

  class Events {
    constructor() { this._handlers = {}; }
    on(name, cb) {
      (this._handlers[name] = this._handlers[name] || []).push(cb);
      return { name, cb, owner: this };
    }
    offref(ref) {
      const list = this._handlers[ref.name] || [];
      const i = list.indexOf(ref.cb);
      if (i >= 0) list.splice(i, 1);
    }
    trigger(name, ...args) { for (const cb of [...(this._handlers[name] || [])]) cb(...args); }
  }

  class Component {
    constructor() { this._cleanups = []; this._children = []; this._loaded = false; }
    load() { this._loaded = true; this.onload(); }
    onload() {}
    unload() {
      for (const c of this._children.splice(0)) c.unload();
      for (const fn of this._cleanups.splice(0)) fn();
      this._loaded = false;
      this.onunload();
    }
    onunload() {}
    addChild(c) { this._children.push(c); if (this._loaded) c.load(); return c; }
    removeChild(c) { const i = this._children.indexOf(c); if (i >= 0) this._children.splice(i, 1); c.unload(); return c; }
    register(fn) { this._cleanups.push(fn); }
    registerEvent(ref) { this._cleanups.push(() => ref.owner.offref(ref)); }
    registerDomEvent(el, type, cb) { el.addEventListener(type, cb); this._cleanups.push(() => el.removeEventListener(type, cb)); }
    registerInterval(id) { this._cleanups.push(() => clearInterval(id)); return id; }
  }

  class TAbstractFile {}
  class TFile extends TAbstractFile {
    constructor(path) {
      super();
      this.path = path;
      this.name = path.split("/").pop();
      this.basename = this.name.replace(/\.[^.]+$/, "");
      this.extension = (this.name.match(/\.([^.]+)$/) || [, ""])[1];
    }
  }

  class View extends Component {
    constructor(leaf) {
      super();
      this.leaf = leaf;
      this.app = leaf.app;
      this.containerEl = document.createElement("div");
      this.containerEl.className = "workspace-leaf-content";
    }
  }

  class ItemView extends View {
    constructor(leaf) {
      super(leaf);
      const header = document.createElement("div");
      header.className = "view-header";
      this.contentEl = document.createElement("div");
      this.contentEl.className = "view-content";
      this.containerEl.append(header, this.contentEl);
    }
    async onOpen() {}
    async onClose() {}
    addAction() { return document.createElement("div"); }
  }

  class WorkspaceLeaf {
    constructor(app, parentEl) { this.app = app; this.parentEl = parentEl; this.view = null; }
    async setViewState(state) {
      const factory = this.app.__viewFactories[state.type];
      if (!factory) throw new Error(`no view registered for ${state.type}`);
      this.view = factory(this);
      this.parentEl.appendChild(this.view.containerEl);
      this.view.load();
      await this.view.onOpen();
    }
    async openFile(file, openState) {
      const eState = (openState && openState.eState) || {};
      this.app.__open({ path: file.path, line: eState.line, subpath: eState.subpath });
    }
  }

  // -- a little Markdown: headings, lists, paragraphs, `code`, **bold**, *italic*, [[links]] ----------
  const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  function inline(s) {
    return esc(s)
      .replace(/`([^`]+)`/g, "<code>$1</code>")
      .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[^*])\*([^*]+)\*/g, "$1<em>$2</em>")
      .replace(/!?\[\[([^\]|]+)(?:\|([^\]]+))?\]\]/g, (m, t, a) => `<a class="internal-link" data-href="${t}">${a || t}</a>`);
  }
  function renderMarkdown(md) {
    const out = [];
    const blocks = md.replace(/\r\n?/g, "\n").split(/\n{2,}/);
    for (const block of blocks) {
      const lines = block.split("\n").filter((l) => l.trim() !== "");
      if (!lines.length) continue;
      const h = /^(#{1,6})\s+(.*)$/.exec(lines[0]);
      if (h && lines.length === 1) { out.push(`<h${h[1].length}>${inline(h[2])}</h${h[1].length}>`); continue; }
      if (lines.every((l) => /^\s*([-*]|\d+\.)\s+/.test(l))) {
        const ordered = /^\s*\d+\./.test(lines[0]);
        const items = lines.map((l) => `<li>${inline(l.replace(/^\s*([-*]|\d+\.)\s+/, ""))}</li>`).join("");
        out.push(ordered ? `<ol>${items}</ol>` : `<ul>${items}</ul>`);
        continue;
      }
      out.push(`<p>${lines.map(inline).join("<br>")}</p>`);
    }
    return out.join("");
  }

  const MarkdownRenderer = {
    async render(app, markdown, el, sourcePath, component) {
      const div = document.createElement("div");
      div.innerHTML = renderMarkdown(markdown);
      while (div.firstChild) el.appendChild(div.firstChild);
    },
    async renderMarkdown(markdown, el, sourcePath, component) { return MarkdownRenderer.render(null, markdown, el, sourcePath, component); },
  };

  class Plugin extends Component {
    constructor(app, manifest) { super(); this.app = app; this.manifest = manifest; }
    async loadData() { return window.__cairnData ? JSON.parse(JSON.stringify(window.__cairnData)) : null; }
    async saveData(data) { window.__cairnData = JSON.parse(JSON.stringify(data)); }
    registerView(type, factory) { this.app.__viewFactories[type] = factory; }
    addRibbonIcon(icon, title, cb) {
      const b = document.createElement("button");
      b.className = "side-dock-ribbon-action";
      b.title = title;
      b.textContent = "◆";
      b.addEventListener("click", cb);
      document.getElementById("ribbon").appendChild(b);
      return b;
    }
    addCommand(cmd) { this.app.__commands[cmd.id] = cmd; return cmd; }
    addSettingTab(tab) { this.app.__settingTabs.push(tab); }
  }

  class PluginSettingTab {
    constructor(app, plugin) { this.app = app; this.plugin = plugin; this.containerEl = document.createElement("div"); }
    display() {}
    hide() {}
  }

  class Setting {
    constructor(containerEl) { this.settingEl = document.createElement("div"); containerEl.appendChild(this.settingEl); }
    setName() { return this; }
    setDesc() { return this; }
    addText(cb) { return this; }
    addSlider(cb) { return this; }
  }

  /** Obsidian's CORS-free request; here a no-cors fetch: an opaque answer means something is listening. */
  // Obsidian's requestUrl is not subject to CORS; here the body is read when the daemon allows this page's
  // origin, and otherwise only that something answers is known (a no-cors fetch).
  async function requestUrl(req) {
    const url = typeof req === "string" ? req : req.url;
    try {
      const res = await fetch(url, { cache: "no-store" });
      const text = await res.text();
      let json = null;
      try { json = JSON.parse(text); } catch (e) { json = null; }
      return { status: res.status, text, json, headers: {} };
    } catch (e) {
      await fetch(url, { mode: "no-cors", cache: "no-store" });
      return { status: 200, text: "", json: null, headers: {} };
    }
  }

  function debounce(fn, ms) {
    let t = null;
    const d = (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); return d; };
    d.cancel = () => { clearTimeout(t); return d; };
    return d;
  }

  class Notice { constructor(message) { console.info("Notice:", message); } }

  window.obsidianStub = {
    Component, Events, ItemView, MarkdownRenderer, Notice, Plugin, PluginSettingTab, Setting, TAbstractFile, TFile, View,
    WorkspaceLeaf, debounce, requestUrl,
  };
})();
