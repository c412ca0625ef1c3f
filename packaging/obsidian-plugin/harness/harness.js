// Boots the built plugin (main.js, CommonJS) against the Obsidian stand-in: a `require` that knows only
// "obsidian", an app with a workspace and a vault listing the files from files.json, then the plugin's
// own onload() and activateView() — the same calls Obsidian makes.
(async function () {
  "use strict";
  const O = window.obsidianStub;
  const files = await (await fetch("files.json", { cache: "no-store" })).json();
  const byPath = new Map(files.map((p) => [p, new O.TFile(p)]));
  const workspace = new O.Events();
  const app = { workspace, vault: {}, __viewFactories: {}, __commands: {}, __settingTabs: [] };
  let activeFile = null;
  const sidebarLeaf = new O.WorkspaceLeaf(app, document.getElementById("sidebar"));
  const noteLeaf = new O.WorkspaceLeaf(app, document.getElementById("note"));
  window.__opened = [];

  // The vault's folder (window.__vaultPath, set by a test): the plugin checks the daemon serves it.
  app.vault.adapter = { getBasePath: () => window.__vaultPath || "" };
  app.vault.getAbstractFileByPath = (path) => byPath.get(path) || null;
  app.vault.getMarkdownFiles = () => [...byPath.values()].filter((f) => f.extension === "md");
  workspace.getActiveFile = () => activeFile;
  workspace.getLeaf = () => noteLeaf;
  workspace.getRightLeaf = () => sidebarLeaf;
  workspace.getLeavesOfType = (type) => (sidebarLeaf.view && sidebarLeaf.view.getViewType() === type ? [sidebarLeaf] : []);
  workspace.revealLeaf = async () => {};
  workspace.openLinkText = async (linktext) => {
    const [path, ...rest] = linktext.split("#");
    app.__open({ path, subpath: rest.length ? "#" + rest.join("#") : undefined });
  };

  function setActive(path) {
    activeFile = byPath.get(path) || null;
    for (const li of document.querySelectorAll("#file-list li")) li.classList.toggle("is-active", li.dataset.path === path);
    workspace.trigger("file-open", activeFile);
    workspace.trigger("active-leaf-change", noteLeaf);
  }

  app.__open = (where) => {
    window.__opened.push(where);
    const body = document.getElementById("note-body");
    body.textContent = "";
    const title = document.createElement("h2");
    title.textContent = where.path;
    const at = document.createElement("div");
    at.className = "opened-at";
    at.textContent = where.line !== undefined ? `opened at line ${where.line + 1}` : where.subpath ? `opened at ${where.subpath}` : "opened";
    body.append(title, at);
    setActive(where.path);
  };

  const list = document.getElementById("file-list");
  for (const path of files) {
    const li = document.createElement("li");
    li.textContent = path;
    li.dataset.path = path;
    li.addEventListener("click", () => app.__open({ path }));
    list.appendChild(li);
  }

  window.module = { exports: {} };
  window.exports = window.module.exports;
  window.require = (name) => {
    if (name === "obsidian") return O;
    throw new Error(`Cannot find module '${name}' (not in the harness)`);
  };
  await new Promise((resolve, reject) => {
    const s = document.createElement("script");
    s.src = "main.js";
    s.onload = resolve;
    s.onerror = () => reject(new Error("main.js did not load"));
    document.body.appendChild(s);
  });
  const exported = window.module.exports;
  const PluginClass = exported.default || exported;
  const plugin = new PluginClass(app, { id: "cairn", name: "Cairn", version: "harness" });
  await plugin.onload();
  await plugin.activateView();
  window.__plugin = plugin;
  window.__app = app;
  window.__setActive = setActive;
  document.body.dataset.ready = "true";
})().catch((err) => {
  document.body.dataset.ready = "error";
  document.body.dataset.error = String(err && err.stack || err);
  console.error(err);
});
