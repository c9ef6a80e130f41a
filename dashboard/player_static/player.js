// The episode timeline player: a Streamlit custom component spoken in plain JS (the
// postMessage protocol of streamlit-component-lib, without its npm build).
// Args: episode, spec (Vega-Lite, with the variable `cursor`), n_steps, dt, step (the
// server's step), answers (the seq of the player's value the page's run had handled, if
// any), vstep, frames {step: data URL}, total, violated {step: "spec, spec"}, prerendering
// (more frames are on their way), web ({scene, poses}: files this player fetches once and
// draws with WebGL, webview.js; without WebGL it sends the event "nowebgl" and the page
// sends frames rendered on the server instead).
// Value sent back on pause / seek / stepping: {step, seq, event}; n / p send the event
// "next" / "previous" (the page opens that episode of its picker's list); "frames" asks, once
// per episode, for the first frame when the page's arguments came without one; "drawn" says,
// once per episode, that the WebGL picture is drawn (the page's tables follow it).
(function () {
"use strict";

const root = document.getElementById("timeline");
const img = document.getElementById("frame");
const playBtn = document.getElementById("play");
const readout = document.getElementById("readout");
const statusLine = document.getElementById("status");
const violatedLine = document.getElementById("violated");
const progressBar = document.querySelector("#progress > div");
const speedSel = document.getElementById("speed");
let glCanvas = document.getElementById("gl");  // replaced by a new one when its WebGL context is gone for good
const marksCanvas = document.getElementById("marks");
const viewSel = document.getElementById("view");
const rendererLine = document.getElementById("renderer");

// The chart library (vl-convert's vega bundle, 0.9 MB) loads after this script, not before
// it: a player re-created by a rerun hears keys from its first moment, not once the bundle
// is parsed (a key pressed meanwhile was lost; seen in CI under load). And it loads after the
// first frame is drawn (or once no frame is coming, or CHART_WAIT_MS after the page's first
// message): parsing it and drawing the chart hold the page's main thread for 0.3-0.8 s on a
// loaded machine, and the frame, and the page's next messages, waited behind them.
const CHART_WAIT_MS = 1500;
const vegaSrc = document.currentScript.dataset.vega || "vega-bundle.js";
let openChartGate = null;
const vegaReady = new Promise((resolve) => { openChartGate = resolve; }).then(() => new Promise((resolve, reject) => {
  const tag = document.createElement("script");
  tag.src = vegaSrc;
  tag.onload = resolve;
  tag.onerror = () => reject(new Error(`could not load ${tag.src}`));
  document.head.appendChild(tag);
}));

const S = {
  episode: null, nSteps: 1, dt: 0.05, vstep: null, frames: {}, nFrames: 0, total: 0, violated: {},
  step: 0, shownStep: -1, serverStep: null, playing: false, seq: 0, view: null, spec: null,
  cursorBusy: false, cursorWanted: null, chartWidth: 0, loads: [], emitTimer: null, pending: null,
  lastSeq: null, lastMove: null, answers: null, queued: [], askedFirst: null, chartTimer: null,
  web: null, webState: "off", sceneView: null, sceneUrl: null, ep: null, viewName: null, saidNoWebgl: false,
  saidDrawn: null, lost: false, renewTimer: null, drawnWaits: [],
};

function send(type, data) {
  window.parent.postMessage(Object.assign({ isStreamlitMessage: true, type: type }, data), "*");
}
let sentHeight = -1;
function setHeight() {
  // the content's own height: the document's scrollHeight is at least the iframe's, so
  // sending it back (plus a margin) grew the iframe a little on every update, without end
  const height = Math.ceil(root.getBoundingClientRect().bottom) + 4;
  if (height !== sentHeight) {
    sentHeight = height;
    send("streamlit:setFrameHeight", { height: height });
  }
}
// A remounted iframe restarts its counter: the load id keeps every value distinct.
const LOAD_ID = Math.random().toString(36).slice(2, 10);
const MEMO = "safevla.timeline";
function remember() {
  try {
    sessionStorage.setItem(MEMO, JSON.stringify({ episode: S.episode, step: S.step, playing: S.playing,
                                                  pending: S.pending || null, moved: S.lastMove, at: Date.now() }));
  } catch (e) { /* storage off: a remount starts from the page's step */ }
}
// The newest player's script claims the keys: when a rerun re-creates the iframe, an old
// one still in the page stops stepping as soon as the new one has started (one key, one
// step), and the new one keeps the keys that come before the page's first message to it.
const OWNER = "safevla.timeline.owner";
try { sessionStorage.setItem(OWNER, LOAD_ID); } catch (e) { /* storage off: see ownsKeys */ }
function ownsKeys() {
  try {
    const owner = sessionStorage.getItem(OWNER);
    if (owner !== null) return owner === LOAD_ID;
  } catch (e) { /* storage off */ }
  return !window.frameElement || window.frameElement.isConnected;
}
// A value the old iframe sent that no page run has handled: when pre-rendering ends, the page's
// run draws the player outside the polling fragment, and a value the old iframe sent from
// inside it meanwhile reruns a fragment that no longer exists, which Streamlit skips. The
// page then kept the old step until the next interaction. Sent again, it reruns the page.
// A value sent twice moves the page to the same step, or n / p of an episode it has left.
function unanswered(memo) {
  if (!memo || !memo.moved || memo.moved.seq === S.answers) return false;
  return memo.moved.event === "next" || memo.moved.event === "previous" || S.step !== S.serverStep;
}
function recalled(episode) {
  try {
    const m = JSON.parse(sessionStorage.getItem(MEMO) || "null");
    return m && m.episode === episode && Date.now() - m.at < 10000 ? m : null;
  } catch (e) { return null; }
}
// The values a re-created player sends again when its page never handled them (`unanswered`).
const RESENT_EVENTS = new Set(["step", "seek", "pause", "next", "previous"]);
function emit(event) {
  clearTimeout(S.emitTimer);
  S.pending = null;
  S.seq += 1;
  S.lastSeq = `${LOAD_ID}:${S.seq}`;
  if (RESENT_EVENTS.has(event)) S.lastMove = { seq: S.lastSeq, event: event };
  remember();
  send("streamlit:setComponentValue", { value: { step: S.step, seq: S.lastSeq, event: event, episode: S.episode },
                                        dataType: "json" });
}
// Stepping by keyboard sends one value after the keys stop (each value reruns the page).
// The value waiting to be sent is remembered: when a rerun re-creates this iframe inside
// those 450 ms (pre-rendering finishing does), the new iframe sends it instead.
function emitSoon(event) {
  clearTimeout(S.emitTimer);
  S.pending = event;
  remember();
  S.emitTimer = setTimeout(() => emit(event), 450);
}

// ---------------------------------------------------------------- chart
function moveCursor(step) {
  S.cursorWanted = step;
  if (!S.view || S.cursorBusy) return;  // the running update picks up the latest wish
  S.cursorBusy = true;
  const k = S.cursorWanted;
  S.view.signal("cursor", k).runAsync().catch(() => {}).finally(() => {
    S.cursorBusy = false;
    if (S.cursorWanted !== k) moveCursor(S.cursorWanted);
  });
}

function stepOfPick(value) {
  if (!value) return null;
  let v = value.step;
  if (Array.isArray(v)) v = v[0];
  if (v === undefined && Array.isArray(value.vlPoint && value.vlPoint.or)) v = value.vlPoint.or[0].step;
  const k = Math.round(Number(v));
  return Number.isFinite(k) ? k : null;
}

async function embedChart() {
  if (!S.spec) return;
  await vegaReady;
  const box = document.getElementById("chart");
  // the column's width, not the chart box's: vega-embed sizes its box to the last chart drawn,
  // so measuring the box kept an old, wider chart that the column then cut on the right
  const avail = document.getElementById("left").clientWidth;
  const width = Math.max(220, avail - 85);
  S.chartWidth = avail;
  const spec = JSON.parse(JSON.stringify(S.spec));
  (spec.vconcat || []).forEach((p) => { p.width = width; });
  (spec.params || []).forEach((p) => { if (p.name === "cursor") p.value = S.step; });
  delete spec.title;  // the legend line under the chart says it, at any width
  if (S.view) S.view.finalize();
  const res = await vegaEmbed(box, spec, { actions: false, renderer: "svg" });
  S.view = res.view;
  S.view.addSignalListener("pt", (name, value) => {
    const k = stepOfPick(value);
    if (k !== null) { pause(false); seek(k); emit("seek"); }
  });
  moveCursor(S.step);
  setHeight();
}

// An episode's chart is embedded once its first picture is drawn: vega-embed's parse of the
// spec is synchronous work that, run at once on n, held back the poses' arrival and the picture.
function episodeShown() {
  const waits = S.drawnWaits;
  S.drawnWaits = [];
  waits.forEach((w) => { if (w.episode === S.episode) w.resolve(); });  // an older episode's: its timeout
}
function episodeDrawn(episode) {
  return new Promise((resolve) => {
    S.drawnWaits.push({ episode, resolve });
    setTimeout(resolve, CHART_WAIT_MS);  // nor wait long for a slow picture
  });
}

// ---------------------------------------------------------------- frames
img.addEventListener("load", () => {
  openChartGate();  // the first frame is drawn: the chart's turn
  episodeShown();
  const now = performance.now();
  S.loads.push(now);
  while (S.loads.length && now - S.loads[0] > 2000) S.loads.shift();
  if (S.playing && S.loads.length > 1) {
    const fps = (S.loads.length - 1) / ((now - S.loads[0]) / 1000);
    root.dataset.fps = fps.toFixed(1);
  }
});

// ---------------------------------------------------------------- WebGL
// Whether the browser offers WebGL, asked once: each probe is a WebGL context of its own, and
// Chromium loses the oldest of a page's contexts past 16 (the player's, some episodes on).
let webglOffered = null;
function hasWebGL() {
  if (webglOffered === null) {
    try {
      const gl = document.createElement("canvas").getContext("webgl2") || document.createElement("canvas").getContext("webgl");
      webglOffered = !!gl;
      const lose = gl && gl.getExtension("WEBGL_lose_context");
      if (lose) lose.loseContext();  // the probe's context, given back now rather than at garbage collection
    } catch (e) { webglOffered = false; }
  }
  return webglOffered;
}
function fitCanvas() {
  const w = Math.max(160, Math.round(document.getElementById("webbox").clientWidth || 480));
  const h = Math.round(w * 3 / 4);
  if (S.ep && (glCanvas.width !== w || glCanvas.height !== h)) S.ep.setSize(w, h);
}
function onDraw(step, ms) {
  root.dataset.frameStep = String(step);
  root.dataset.drawMs = ms.toFixed(1);
  if (root.dataset.firstDraw === undefined) {
    root.dataset.firstDraw = String(Math.round(performance.now()));  // ms since this iframe's start
    openChartGate();  // the first picture is drawn: the chart's turn
  }
  if (S.saidDrawn !== S.episode) {  // once per episode: the page's tables follow the first picture
    S.saidDrawn = S.episode;
    episodeShown();
    setTimeout(() => emit("drawn"), 0);
  }
  const now = performance.now();
  S.loads.push(now);
  while (S.loads.length && now - S.loads[0] > 2000) S.loads.shift();
  if (S.playing && S.loads.length > 1) root.dataset.fps = ((S.loads.length - 1) / ((now - S.loads[0]) / 1000)).toFixed(1);
}
function noWebgl(why) {
  S.webState = "failed";
  S.ep = null;
  root.classList.remove("web");
  root.dataset.renderer = "frames";
  rendererLine.textContent = `Renderer: frames rendered by MuJoCo on the server (${why}).`;
  // told after the page's arguments are taken in (the value carries, and remembers, the step
  // the player takes from them, not the step it had before them)
  if (!S.saidNoWebgl) { S.saidNoWebgl = true; setTimeout(() => emit("nowebgl"), 0); }
}
async function openWeb(web, episode) {
  S.webState = "loading";
  statusLine.textContent = "loading the 3-D scene …";
  try {
    const get = (url) => fetch(url).then((r) => {
      if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
      return r.arrayBuffer();
    });
    // the files and the drawing code load side by side (three.js is 2 MB of JavaScript)
    const [mod, sceneBuf, posesBuf] = await Promise.all([
      import("./webview.js"), S.sceneUrl === web.scene ? null : get(web.scene), get(web.poses)]);
    performance.mark("web:files");  // for the benchmark's breakdown (benchmarks/dashboard_player.py)
    if (sceneBuf !== null) {
      const old = S.sceneView;
      S.sceneView = null;
      try {
        S.sceneView = await mod.openScene(glCanvas, marksCanvas, sceneBuf, old && old.renderer);
      } finally {
        if (old) setTimeout(() => mod.closeScene(old), 0);  // after this task's first draw of the new scene
      }
      S.sceneUrl = web.scene;
      performance.mark("web:scene");
    }
    if (S.episode !== episode) return;  // another episode was chosen meanwhile
    S.ep = mod.openEpisode(S.sceneView, posesBuf, { onDraw: onDraw });
    viewSel.innerHTML = "";
    for (const name of S.ep.views) {
      const o = document.createElement("option");
      o.value = name;
      o.textContent = name === "orbit" ? "free orbit" : name === "robot0_eye_in_hand" ? "wrist" : name;
      viewSel.appendChild(o);
    }
    S.webState = "ready";
    root.classList.add("web");
    root.dataset.renderer = "webgl";
    rendererLine.textContent = "Renderer: WebGL in this browser (three.js), from the MuJoCo scene and the recorded poses; steps need no request.";
    fitCanvas();
    const view = S.ep.views.includes(S.viewName) ? S.viewName : S.ep.views[0];
    viewSel.value = view;
    S.ep.setView(view);
    show(S.step);
    setHeight();
  } catch (e) {
    console.error(e);
    if (S.episode === episode) noWebgl(`the 3-D scene could not be drawn: ${e.message}`);
  }
}
viewSel.addEventListener("change", () => {
  S.viewName = viewSel.value;
  if (S.ep) { S.ep.setView(S.viewName); }
});

function show(step) {
  S.step = Math.min(Math.max(0, step), S.nSteps - 1);
  root.dataset.step = String(S.step);
  if (S.ep) {
    S.ep.show(S.step);
    S.shownStep = S.step;
    readout.textContent = `step ${S.step} / ${S.nSteps - 1} · t = ${(S.step * S.dt).toFixed(2)} s`;
    statusLine.textContent = S.lost ? LOST_TEXT : "";  // a step drawn while the context is away draws nothing
    remember();
    violatedLine.textContent = S.violated[S.step] ? `Violated at this step: ${S.violated[S.step]}` : "";
    moveCursor(S.step);
    return;
  }
  const url = S.frames[S.step];
  if (url !== undefined && S.shownStep !== S.step) {
    img.src = url;
    img.dataset.step = String(S.step);
    root.dataset.frameStep = String(S.step);
    S.shownStep = S.step;
  }
  const ready = url !== undefined;
  readout.textContent = `step ${S.step} / ${S.nSteps - 1} · t = ${(S.step * S.dt).toFixed(2)} s`;
  statusLine.textContent = ready ? (S.nFrames < S.total ? `${S.nFrames}/${S.total} frames ready` : "")
    : (S.total ? `step ${S.step} is not rendered yet (${S.nFrames}/${S.total} frames ready)` : "no replay frames");
  remember();
  violatedLine.textContent = S.violated[S.step] ? `Violated at this step: ${S.violated[S.step]}` : "";
  moveCursor(S.step);
}
function seek(step) { show(step); }

// ---------------------------------------------------------------- playback
let clock = null;  // {t0, step0}
function tick(now) {
  if (!S.playing) return;
  const rate = Number(speedSel.value) / S.dt;  // steps per second
  const target = clock.step0 + Math.floor(((now - clock.t0) / 1000) * rate);
  if (target > S.step) {
    const next = Math.min(target, S.nSteps - 1);
    if (!S.ep && S.frames[next] === undefined) {  // not rendered yet: wait on the last shown frame
      clock = { t0: now, step0: S.step };
      statusLine.textContent = `buffering: step ${next} is not rendered yet (${S.nFrames}/${S.total})`;
    } else {
      show(next);
    }
    if (S.step >= S.nSteps - 1) { pause(true); return; }
  }
  requestAnimationFrame(tick);
}
function play() {
  if (S.playing || (S.nFrames === 0 && !S.ep)) return;
  if (S.step >= S.nSteps - 1) show(0);
  S.playing = true;
  root.dataset.playing = "1";
  playBtn.textContent = "⏸ pause";
  remember();
  S.loads = [];
  clock = { t0: performance.now(), step0: S.step };
  requestAnimationFrame(tick);
}
function pause(tell) {
  if (!S.playing) return;
  S.playing = false;
  root.dataset.playing = "0";
  playBtn.textContent = "▶ play";
  remember();
  if (tell) emit("pause");
}
function toggle() { if (S.playing) pause(true); else play(); }
function stepBy(n) { pause(false); show(S.step + n); emitSoon("step"); }

playBtn.addEventListener("click", toggle);
document.getElementById("back").addEventListener("click", () => stepBy(-1));
document.getElementById("fwd").addEventListener("click", () => stepBy(1));
function toViolation() {
  if (S.vstep !== null) { pause(false); show(S.vstep); emit("seek"); }
}
document.getElementById("toviol").addEventListener("click", toViolation);

// ---------------------------------------------------------------- keyboard
// Keys work without clicking into the iframe: the component is served from the app's own
// origin, so it listens on the parent page too (and on itself once focused).
function typingInto(el) {
  if (!el || !el.tagName) return false;
  const tag = el.tagName.toUpperCase();
  if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable) return true;
  const role = el.getAttribute && el.getAttribute("role");
  return role === "slider" || role === "combobox" || role === "listbox" || role === "option" || role === "textbox";
}
function keyMove(ev) {  // what a key asks of the player; null: not a key of the player's
  if (ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey || typingInto(ev.target)) return null;
  const big = ev.shiftKey ? 10 : 1;
  if (ev.key === " " || ev.code === "Space") return { toggle: true };
  if (ev.key === "ArrowRight") return { by: big };
  if (ev.key === "ArrowLeft") return { by: -big };
  if (ev.key === "Home") return { to: 0 };
  if (ev.key === "End") return { to: Infinity };
  if (ev.key === "v" || ev.key === "V") return { violation: true };
  if (ev.key === "n" || ev.key === "N") return { episode: "next" };  // the page opens it
  if (ev.key === "p" || ev.key === "P") return { episode: "previous" };
  return null;
}
function applyMove(move) {
  if (move.toggle) toggle();
  else if (move.violation) toViolation();
  else if (move.episode) { pause(false); emit(move.episode); }
  else if (move.by !== undefined) stepBy(move.by);
  else stepBy(Math.min(move.to, S.nSteps - 1) - S.step);
}
function onKey(ev) {
  if (!ownsKeys()) {  // a newer player (the page re-created the iframe) has the keys now
    if (parentDoc) parentDoc.removeEventListener("keydown", onKey);
    return;
  }
  const move = keyMove(ev);
  if (move === null) return;
  ev.preventDefault();
  ev.stopPropagation();
  if (S.episode) applyMove(move);
  else S.queued.push(move);  // the page's arguments have not come yet: applied once they have
}
// A rerun that re-creates the player removes the old iframe (or loads its page again) before
// the new player's script has run, and a gone document's listeners never run: a key pressed
// in that gap reached nobody (CI of 87f6b5b). So the page itself keeps those keys: a listener
// of the page's own realm, which outlives every player, queues the key's move while no live
// player (its iframe in the page, showing its document) is there, and the next player applies
// what was queued in the last KEPT_KEYS_MS (older keys were meant for another page of the app).
// Only keys within KEPT_KEYS_MS of a live player's last sign of life are kept: on a page that
// no longer shows a player (an episode without a replay), space and the arrows scroll again.
const KEPT_KEYS_MS = 3000;
const ALIVE_EVERY_MS = 500;
function keepKeysInPage(host) {
  // everything the page keeps is of its own realm (a player's object there would keep that
  // player's whole window, frames included, alive after its iframe is gone)
  if (!host.__safevlaKeptKeys) {
    // made *and added* by the page's realm: chromium ran no listener the player had added to
    // the page once its iframe was gone, even one made with the page's `Function`
    new host.Function(`
      window.__safevlaKeptKeys = [];
      const typingInto = ${typingInto.toString()};
      const keyMove = ${keyMove.toString()};
      document.addEventListener("keydown", (ev) => {
        const player = window.__safevlaPlayer;
        const live = player && player.frame.isConnected && player.frame.contentDocument === player.doc.deref();
        if (!player || live || location.pathname !== player.path || Date.now() - player.alive > ${KEPT_KEYS_MS}) return;
        const move = keyMove(ev);
        if (move === null) return;
        ev.preventDefault();
        window.__safevlaKeptKeys.push({ move: move, at: Date.now() });
      });`)();
  }
  const me = host.Object.assign(new host.Object(), {
    frame: window.frameElement, doc: new host.WeakRef(document), path: host.location.pathname, alive: Date.now() });
  host.__safevlaPlayer = me;
  setInterval(() => { me.alive = Date.now(); }, ALIVE_EVERY_MS);  // stops with this document
  const now = Date.now();
  return host.__safevlaKeptKeys.splice(0).filter((k) => now - k.at <= KEPT_KEYS_MS).map((k) => k.move);
}
document.addEventListener("keydown", onKey);
let parentDoc = null;
try {
  parentDoc = window.parent.document;  // throws when the parent is another origin
  parentDoc.addEventListener("keydown", onKey);
  window.addEventListener("pagehide", () => parentDoc.removeEventListener("keydown", onKey));
  root.dataset.keys = "parent";
  try {
    S.queued.push(...keepKeysInPage(window.parent));
  } catch (e) {  // a page that forbids `Function` (a strict CSP): keys in the gap are lost
    console.warn("safevla timeline: the page cannot keep keys between players", e);
  }
} catch (e) {
  root.dataset.keys = "focus";
  root.focus();
}

// ---------------------------------------------------------------- a lost WebGL context
// The browser can take the picture's WebGL context away: Chromium takes a page's oldest past 16
// live ones (a researcher's many detail tabs), and a GPU process can restart. The canvas then
// shows nothing. The player says so and asks for it back; when it comes back, three.js uploads
// the scene again and the player draws the step. When it has not come back LOST_WAIT_MS after
// this tab was last seen, the scene opens on a new canvas (a hidden tab waits: a context made
// there would take another tab's).
const LOST_WAIT_MS = 1500;
const LOST_TEXT = "the browser took this picture's WebGL context away; drawing it again …";
function watchContext(canvas) {
  canvas.addEventListener("webglcontextlost", (ev) => {
    ev.preventDefault();  // the browser may give it back
    S.lost = true;
    root.dataset.webgl = "lost";
    statusLine.textContent = LOST_TEXT;
    renewSoon();
  });
  canvas.addEventListener("webglcontextrestored", () => {
    S.lost = false;
    clearTimeout(S.renewTimer);
    // drawn after three.js's own handler of this event has set its renderer up again
    setTimeout(() => {
      if (S.sceneView) S.sceneView.still.forget();  // the still layer's texture was lost with the context
      if (S.ep) show(S.step);
      root.dataset.webgl = "restored";
    }, 0);
  });
}
function renewSoon() {
  clearTimeout(S.renewTimer);
  if (S.lost && document.visibilityState === "visible") S.renewTimer = setTimeout(renew, LOST_WAIT_MS);
}
async function renew() {
  if (!S.lost) return;
  const mod = await import("./webview.js");
  if (S.sceneView) mod.closeScene(S.sceneView);  // its orbit camera lets go of the mouse
  const fresh = glCanvas.cloneNode(false);
  glCanvas.replaceWith(fresh);
  glCanvas = fresh;
  watchContext(fresh);
  S.lost = false;
  S.sceneView = null;
  S.sceneUrl = null;
  S.ep = null;
  root.dataset.webgl = "renewed";
  if (S.web) openWeb(S.web, S.episode);  // the files from the browser's cache
}
watchContext(glCanvas);
document.addEventListener("visibilitychange", renewSoon);

// ---------------------------------------------------------------- Streamlit
window.addEventListener("message", (event) => {
  const msg = event.data;
  if (!msg || msg.type !== "streamlit:render") return;
  const a = msg.args || {};
  const fresh = a.episode !== S.episode;
  const web = a.web || null;
  const webChanged = !!web !== !!S.web || (web && (web.scene !== S.web.scene || web.poses !== S.web.poses));
  if (fresh) {
    pause(false);
    S.ep = null;
    S.episode = a.episode; S.frames = {}; S.shownStep = -1; S.spec = a.spec;
    S.lastSeq = null; S.lastMove = null;
    root.dataset.episode = a.episode;  // what the frames shown belong to (tests, benchmarks)
  }
  S.nSteps = Math.max(1, a.n_steps || 1);
  S.dt = a.dt || 0.05;
  S.vstep = (a.vstep === null || a.vstep === undefined) ? null : a.vstep;
  S.violated = a.violated || {};
  S.total = a.total || 0;
  Object.assign(S.frames, a.frames || {});
  S.nFrames = Object.keys(S.frames).length;
  root.dataset.frames = String(S.nFrames);
  progressBar.style.width = S.total ? `${(100 * S.nFrames / S.total).toFixed(1)}%` : "0";
  document.getElementById("side").style.display = S.total ? "" : "none";
  const serverMoved = a.step !== S.serverStep;
  S.serverStep = a.step;
  // Each page run says which of the player's values it had handled (`answers`). A run that
  // had not handled the newest one started before it reached the server: its step is older
  // than the player's (a slow answer to a previous key, pause or seek) and must not pull the
  // player back. Only a run that had seen the newest value and still moved the step (the
  // page's slider, the jump button, a deep link) moves the player, and never while a key step
  // waits to be sent.
  const answers = a.answers === undefined || a.answers === null ? null : String(a.answers);
  S.answers = answers;
  const behind = S.lastSeq !== null && answers !== S.lastSeq;
  S.web = web;
  if (web && (fresh || webChanged || S.webState === "off")) {
    if (hasWebGL()) openWeb(web, a.episode);
    else noWebgl("this browser has no WebGL");
  } else if (!web && S.webState !== "failed") {
    S.ep = null;
    S.webState = "off";
    root.classList.remove("web");
    root.dataset.renderer = "frames";
    rendererLine.textContent = "Renderer: frames rendered by MuJoCo on the server.";
  }
  if (!S.nFrames && !a.prerendering && !web) openChartGate();  // no frame is coming: draw the chart now
  if (!S.chartTimer) S.chartTimer = setTimeout(openChartGate, CHART_WAIT_MS);  // nor wait long for a slow frame
  if (fresh) {
    // the page re-created this iframe (e.g. when pre-rendering finished): carry on where it was
    const memo = recalled(a.episode);
    S.step = memo ? memo.step : a.step;
    show(S.step);  // the frame first (it opens the chart's gate once drawn), then the chart
    episodeDrawn(a.episode).then(embedChart).catch((e) => console.error(e)).then(() => {  // frames and keys even without a chart
      show(S.step);
      if (memo && memo.pending) emit(memo.pending);  // the old iframe's value never left it
      else if (unanswered(memo)) emit(memo.moved.event);
      if (memo && memo.playing) play();
      S.queued.splice(0).forEach(applyMove);  // keys pressed before the page's arguments came
    });
  } else if (serverMoved && !behind && !S.playing && S.pending === null) {
    show(a.step);  // the page's slider, the jump button or a deep link moved the step
  } else {
    show(S.step);  // new frames arrived: the current step may be ready now
  }
  if (a.prerendering && !S.nFrames && S.askedFirst !== S.episode) {
    // The page came without a frame (its scene was still opening): ask for the first one now
    // rather than wait for the page's next poll; the server answers as soon as it is rendered.
    S.askedFirst = S.episode;
    emit("frames");
  }
  setHeight();
});
window.addEventListener("resize", () => {
  root.classList.toggle("stacked", window.innerWidth < 760);
  fitCanvas();
  if (Math.abs(document.getElementById("left").clientWidth - S.chartWidth) > 30) embedChart().catch((e) => console.error(e));
  setHeight();
});
root.classList.toggle("stacked", window.innerWidth < 760);
send("streamlit:componentReady", { apiVersion: 1 });
})();  // a scope of its own: the vega bundle declares short globals (S, ...)
