// The `obsidian` module for vitest: the harness's stand-in (a browser script that sets window.obsidianStub).
import "../harness/obsidian-stub.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const O = (globalThis as any).obsidianStub;
export const { Component, Events, ItemView, MarkdownRenderer, Notice, Plugin, PluginSettingTab, Setting, TFile, WorkspaceLeaf, requestUrl } = O;
