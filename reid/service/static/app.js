/* The review page of a circle-reid store: search, identities, the review queue.
 *
 * Plain JavaScript, no libraries, nothing from another host (the server's Content-Security-Policy
 * forbids it). Every request carries the token from the box at the top as
 * "Authorization: Bearer <token>"; the token lives in sessionStorage (gone when the tab closes).
 * Crops are fetched with that header too and shown through blob: URLs, since an <img src> cannot
 * carry a header. Text from the store is always set as text, never parsed as HTML.
 */
"use strict";

(function () {
  const TOKEN_KEY = "reid-token";
  const UNDO_KEY = "reid-undo-stack";
  const CROP_CACHE_MAX = 3000;

  const $ = (id) => document.getElementById(id);
  const state = {
    view: "search",
    identity: null,       // the identity shown (its API record)
    selected: new Set(),  // tracklet ids ticked for a split
    queue: [],            // proposed links shown in the review queue
    current: 0,           // index of the selected link in the queue
    me: null,
  };

  // -- small helpers ------------------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const pad = (n) => String(n).padStart(2, "0");

  /** Seconds since 1970 (UTC) as local "YYYY-MM-DD HH:MM:SS". */
  function fmtTime(seconds) {
    if (seconds === null || seconds === undefined) return "";
    const d = new Date(seconds * 1000);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
           `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  const isoUTC = (seconds) => new Date(seconds * 1000).toISOString();
  const fmtScore = (s) => (s === null || s === undefined ? "–" : Number(s).toFixed(3));

  function tzLabel() {
    const minutes = -new Date().getTimezoneOffset();
    const sign = minutes >= 0 ? "+" : "-";
    const m = Math.abs(minutes);
    return `times are local: UTC${sign}${pad(Math.floor(m / 60))}:${pad(m % 60)}`;
  }

  // -- status bar: one line -----------------------------------------------------------------------
  function status(text, kind) {
    const bar = $("status");
    bar.textContent = String(text).split("\n")[0];
    bar.dataset.state = kind || "info";
    bar.title = bar.textContent;
  }
  const fail = (err) => status(err && err.message ? err.message : String(err), "error");

  class ApiError extends Error {
    constructor(code, detail) {
      super(code ? `Error ${code}: ${detail}` : detail);
      this.code = code;
      this.detail = detail;
    }
  }

  function oneLine(detail) {
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail) && detail.length) {  // FastAPI's list of validation problems
      const d = detail[0];
      const where = (d.loc || []).filter((p) => !["query", "path", "body"].includes(p)).join(".");
      return `${where}: ${d.msg}`;
    }
    return JSON.stringify(detail);
  }

  // -- the token ----------------------------------------------------------------------------------
  const getToken = () => sessionStorage.getItem(TOKEN_KEY) || "";

  /** A request to the API with the token; an ApiError (one line) when the answer is not 2xx. */
  async function api(path, options) {
    const opts = Object.assign({}, options || {});
    const headers = new Headers(opts.headers || {});
    const token = getToken();
    if (token) headers.set("Authorization", "Bearer " + token);
    opts.headers = headers;
    opts.credentials = "same-origin";
    opts.cache = "no-store";
    let response;
    try {
      response = await fetch(path, opts);
    } catch (e) {
      throw new ApiError(0, "the server cannot be reached (" + e.message + ").");
    }
    if (!response.ok) {
      let detail = response.statusText || "request failed";
      try {
        const body = await response.json();
        if (body && body.detail !== undefined) detail = oneLine(body.detail);
      } catch (e) { /* not JSON: keep the status text */ }
      if (response.status === 401) detail += " Enter a token at the top.";
      throw new ApiError(response.status, detail);
    }
    return response;
  }
  const getJSON = async (path) => (await api(path)).json();
  const postJSON = async (path, body) => (await api(path, {
    method: "POST",
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  })).json();

  // -- crops: fetched with the token, shown as blob: URLs ------------------------------------------
  const crops = new Map();  // name -> Promise of a blob: URL

  function cropURL(name) {
    if (!crops.has(name)) {
      if (crops.size >= CROP_CACHE_MAX) forgetCrops();
      const p = api("/api/crops/" + encodeURIComponent(name))
        .then((r) => r.blob())
        .then((b) => URL.createObjectURL(b));
      p.catch(() => crops.delete(name));
      crops.set(name, p);
    }
    return crops.get(name);
  }

  function forgetCrops() {
    for (const p of crops.values()) p.then((u) => URL.revokeObjectURL(u), () => {});
    crops.clear();
  }

  function cropImg(name, alt, cls) {
    const img = el("img", { class: "crop " + (cls || ""), alt: alt || "crop", "data-crop": name || "" });
    if (!name) {
      img.classList.add("missing");
      return img;
    }
    cropURL(name).then((url) => { img.src = url; }, (e) => { img.classList.add("missing"); fail(e); });
    return img;
  }

  async function useToken(token) {
    forgetCrops();
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    state.me = null;
    $("whoami").textContent = "";
    document.body.dataset.role = "";
    if (!token) {
      $("token").placeholder = "paste your access token";
      status("Enter a token to start (tools/serve.py prints one on first start).", "info");
      return false;
    }
    $("token").placeholder = "token set (type to replace)";
    try {
      state.me = await getJSON("/api/me");
      $("whoami").textContent = `${state.me.name} · ${state.me.role}`;
      document.body.dataset.role = state.me.role;
      status(`Signed in as ${state.me.name} (${state.me.role === "review" ? "may review" : "read only"}).`, "ok");
      return true;
    } catch (e) {
      if (e.code === 401) {  // not a token of this server: not kept
        sessionStorage.removeItem(TOKEN_KEY);
        $("token").placeholder = "paste your access token";
      }
      fail(e);
      return false;
    }
  }

  // -- views (#search, #identity/12, #review) -------------------------------------------------------
  function route() {
    const hash = location.hash.replace(/^#/, "");
    const [view, arg] = hash.split("/");
    const name = ["search", "identity", "review"].includes(view) ? view : "search";
    state.view = name;
    for (const v of ["search", "identity", "review"]) {
      $("view-" + v).hidden = v !== name;
      $("nav-" + v).classList.toggle("active", v === name);
    }
    if (!getToken()) return;
    if (name === "identity") {
      const id = parseInt(arg, 10);
      if (id > 0) loadIdentity(id).catch(fail);
      else loadIdentityList().catch(fail);
    } else if (name === "review") {
      loadReview().catch(fail);
    }
  }

  // -- search -----------------------------------------------------------------------------------------
  function localToISO(value, name) {
    if (!value) return null;
    const d = new Date(value);  // a datetime-local value is local time
    if (isNaN(d.getTime())) throw new ApiError(0, `${name} ${value} is not a time.`);
    return d.toISOString();
  }

  function searchParams() {
    const p = new URLSearchParams();
    const k = $("search-k").value.trim();
    if (k) p.set("k", k);
    const cams = $("search-cameras").value.trim();
    if (cams) p.set("cameras", cams.replace(/\s+/g, ""));
    const start = localToISO($("search-start").value, "From");
    const end = localToISO($("search-end").value, "Until");
    if (start) p.set("start", start);
    if (end) p.set("end", end);
    return p;
  }

  async function searchByImage() {
    const file = $("search-file").files[0];
    if (!file) throw new ApiError(0, "Choose an image first (or search by a sighting id).");
    const params = searchParams();
    const form = new FormData();
    form.append("image", file, file.name);
    status("Searching by image…", "busy");
    const t0 = performance.now();
    const data = await (await api("/api/search/image?" + params, { method: "POST", body: form })).json();
    showResults(data, `image ${file.name}`, t0);
    showPreview(URL.createObjectURL(file), true);
  }

  async function searchBySighting(id) {
    const sid = parseInt(id !== undefined ? id : $("search-sighting").value, 10);
    if (!(sid > 0)) throw new ApiError(0, "Give a sighting id (a positive number).");
    $("search-sighting").value = sid;
    const params = searchParams();
    status(`Searching like sighting #${sid}…`, "busy");
    const t0 = performance.now();
    const [data, query] = await Promise.all([
      getJSON(`/api/search/sighting/${sid}?` + params),
      getJSON(`/api/sightings/${sid}`),
    ]);
    showResults(data, `sighting #${sid}`, t0, query);
    showPreview(null);
    cropURL(query.crop).then((url) => showPreview(url, false), () => {});
  }

  /** The query's picture beside the form: an uploaded file (`own`: a blob: URL of ours to revoke when
   * replaced) or a stored sighting's crop (the crop cache's URL, kept). */
  function showPreview(url, own) {
    const img = $("search-preview");
    if (img.dataset.own === "1" && img.src) URL.revokeObjectURL(img.src);
    img.dataset.own = own ? "1" : "";
    if (url) img.src = url;
    else img.removeAttribute("src");
    img.hidden = !url;
  }

  function thresholdLine(data) {
    return el("div", { id: "threshold-line", "data-testid": "threshold-line", class: "threshold-line",
                       "data-threshold": data.threshold, role: "separator" },
      el("span", { class: "above", text: "▲ same person" }),
      el("span", { class: "value",
                   text: `threshold ${fmtScore(data.threshold)}` + (data.threshold_source ? ` (${data.threshold_source})` : "") }),
      el("span", { class: "below", text: "▼ other people" }));
  }

  function resultCard(r, rank, threshold) {
    const same = threshold !== null && threshold !== undefined && r.score >= threshold;
    const cls = threshold === null || threshold === undefined ? "" : (same ? " above" : " below");
    return el("figure", { class: "card result" + cls, "data-testid": "result", "data-rank": rank,
                          "data-sighting": r.id, "data-identity": r.identity, "data-score": r.score,
                          "data-camera": r.camera, "data-time": r.time },
      el("div", { class: "rank", text: "#" + rank }),
      cropImg(r.crop, `sighting ${r.id}`),
      el("figcaption", {},
        el("div", { class: "score", "data-testid": "result-score", text: fmtScore(r.score) }),
        el("div", { class: "meta", text: `cam ${r.camera} · ${fmtTime(r.time).slice(11)}` }),
        el("div", { class: "meta time", title: isoUTC(r.time), text: fmtTime(r.time).slice(0, 10) }),
        el("div", { class: "links" },
          el("a", { href: `#identity/${r.identity}`, "data-testid": "result-identity", title: "open this identity",
                    text: `id #${r.identity}` }),
          el("button", { type: "button", class: "link-button", title: "search like this sighting",
                         "data-testid": "result-similar", text: "similar",
                         onclick: () => searchBySighting(r.id).catch(fail) }))));
  }

  function showResults(data, what, t0, query) {
    const box = $("results");
    box.replaceChildren();
    const th = data.threshold;
    let drawn = false;
    data.results.forEach((r, i) => {
      if (th !== null && th !== undefined && !drawn && r.score < th) {
        box.append(thresholdLine(data));
        drawn = true;
      }
      box.append(resultCard(r, i + 1, th));
    });
    if (th !== null && th !== undefined && !drawn) box.append(thresholdLine(data));
    const above = th === null || th === undefined ? null : data.results.filter((r) => r.score >= th).length;
    const summary = $("search-summary");
    summary.replaceChildren(
      `${data.results.length} result(s) for ${what}, model ${data.model}`,
      query ? el("span", {}, " (", el("a", { href: `#identity/${query.identity}`, text: `identity #${query.identity}` }),
                 `, cam ${query.camera}, ${fmtTime(query.time)})`) : "",
      above === null ? "; no decision threshold known for this model." : `; ${above} at or above the threshold.`);
    status(`${data.results.length} result(s) in ${((performance.now() - t0) / 1000).toFixed(2)} s.`, "ok");
  }

  // -- identities ------------------------------------------------------------------------------------
  async function loadIdentityList() {
    $("identity").hidden = true;
    state.identity = null;
    const list = await getJSON("/api/identities?limit=60");
    const box = $("identity-list");
    box.hidden = false;
    box.replaceChildren(...list.map((it) => el("a", {
      class: "card identity-card", href: `#identity/${it.id}`, "data-testid": "identity-card", "data-identity": it.id },
      cropImg(it.crop, `identity ${it.id}`),
      el("div", { class: "meta strong", text: `#${it.id}` }),
      el("div", { class: "meta", title: `cameras ${it.cameras.join(", ")}`,
                  text: `${it.cameras.length} camera${it.cameras.length === 1 ? "" : "s"}` }),
      el("div", { class: "meta", text: `${it.tracklets} tracklet${it.tracklets === 1 ? "" : "s"}` }))));
    if (!list.length) box.append(el("p", { class: "note", text: "The store has no identities yet." }));
    status(`${list.length} identities, most cameras first.`, "ok");
  }

  /** Show identity `id`; `refresh`: the same one again after a decision (keeps the ticks that still
   * belong to it, and the status line). */
  async function loadIdentity(id, refresh) {
    const ident = await getJSON(`/api/identities/${id}`);
    const members = new Set(ident.tracklets.map((t) => t.id));
    const same = state.identity && state.identity.id === ident.id;
    state.identity = ident;
    state.selected = refresh && same ? new Set([...state.selected].filter((t) => members.has(t))) : new Set();
    $("identity-list").hidden = true;
    $("identity").hidden = false;
    $("identity-input").value = id;
    $("identity").dataset.identity = ident.id;
    const nSight = ident.cameras.reduce((n, c) => n + c.sightings.length, 0);
    $("identity-heading").textContent =
      `Identity #${ident.id} — ${ident.tracklets.length} tracklet(s), ${nSight} sighting(s), ${ident.cameras.length} camera(s)`;
    const merged = $("identity-merged");
    merged.hidden = ident.merged_into === null;
    if (ident.merged_into !== null) {
      merged.replaceChildren("Merged into ", el("a", { href: `#identity/${ident.merged_into}`,
                                                      text: `identity #${ident.merged_into}` }), "; review that one.");
    }
    drawTimeline(ident);
    drawTracklets(ident);
    drawLinks(ident);
    if (!refresh) status(`Identity #${ident.id}.`, "ok");
  }

  function drawTimeline(ident) {
    const box = $("timeline");
    box.replaceChildren();
    const all = ident.cameras.flatMap((c) => c.sightings);
    if (!all.length) {
      box.append(el("p", { class: "note", text: "No sightings." }));
      return;
    }
    let t0 = Math.min(...all.map((s) => s.time));
    let t1 = Math.max(...all.map((s) => s.time));
    if (t1 - t0 < 1) { t0 -= 1; t1 += 1; }
    const span = t1 - t0;
    const pos = (t) => 100 * (t - t0) / span;  // percent of the track (which leaves room for half a picture each side)
    for (const cam of ident.cameras) {
      const track = el("div", { class: "track" });
      for (const s of cam.sightings) {
        const thumb = el("button", {
          type: "button", class: "thumb", "data-testid": "timeline-thumb", "data-sighting": s.id,
          "data-tracklet": s.tracklet, title: `sighting #${s.id} · tracklet #${s.tracklet} · ${fmtTime(s.time)}`,
          onclick: () => toggleTracklet(s.tracklet),
        }, cropImg(s.crop, `sighting ${s.id}`));
        thumb.style.left = pos(s.time) + "%";  // CSSOM, which the CSP allows (unlike style attributes)
        track.append(thumb);
      }
      box.append(el("div", { class: "row", "data-testid": "timeline-row", "data-camera": cam.camera },
        el("div", { class: "label" }, el("strong", { text: `cam ${cam.camera}` }),
           el("small", { text: `${cam.sightings.length} sighting(s)` })),
        track));
    }
    const axis = el("div", { class: "axis" });
    for (let i = 0; i <= 4; i++) {
      const t = t0 + span * i / 4;
      const tick = el("span", { class: "tick", text: fmtTime(t) });
      tick.style.left = pos(t) + "%";
      axis.append(tick);
    }
    box.append(el("div", { class: "row axis-row" }, el("div", { class: "label" }), axis));
    markSelection();
  }

  function drawTracklets(ident) {
    const counts = {};
    const first = {};
    for (const c of ident.cameras) for (const s of c.sightings) {
      counts[s.tracklet] = (counts[s.tracklet] || 0) + 1;
      if (!(s.tracklet in first)) first[s.tracklet] = s.crop;
    }
    $("tracklet-rows").replaceChildren(...ident.tracklets.map((t) => el("tr", { "data-tracklet": t.id, "data-testid": "tracklet-row" },
      el("td", {}, el("input", { type: "checkbox", class: "pick", "data-testid": "tracklet-check", "data-tracklet": t.id,
                                 "aria-label": `select tracklet ${t.id}`, checked: state.selected.has(t.id),
                                 onchange: (e) => toggleTracklet(t.id, e.target.checked) })),
      el("td", { text: `#${t.id}` }),
      el("td", { text: t.camera }),
      el("td", { text: fmtTime(t.start), title: isoUTC(t.start) }),
      el("td", { text: fmtTime(t.end), title: isoUTC(t.end) }),
      el("td", { text: counts[t.id] || 0 }),
      el("td", {}, cropImg(first[t.id], `tracklet ${t.id}`, "small")),
      el("td", { class: "source", text: t.source }))));
  }

  function toggleTracklet(id, on) {
    const want = on === undefined ? !state.selected.has(id) : on;
    if (want) state.selected.add(id); else state.selected.delete(id);
    markSelection();
  }

  function markSelection() {
    for (const box of document.querySelectorAll("#tracklet-rows input.pick")) {
      box.checked = state.selected.has(Number(box.dataset.tracklet));
      box.closest("tr").classList.toggle("picked", box.checked);
    }
    for (const t of document.querySelectorAll("#timeline .thumb")) {
      t.classList.toggle("picked", state.selected.has(Number(t.dataset.tracklet)));
    }
    $("split-btn").textContent = state.selected.size
      ? `Split ${state.selected.size} selected tracklet(s)` : "Split selected tracklets";
  }

  function drawLinks(ident) {
    const rows = ident.links.map((l) => el("tr", { "data-link": l.id, "data-status": l.status, "data-testid": "link-row" },
      el("td", { text: `#${l.id}` }),
      el("td", { text: `#${l.tracklet}` }),
      el("td", { text: fmtScore(l.score) }),
      el("td", { text: l.made_by + (l.by ? ` (${l.by})` : "") }),
      el("td", {}, el("span", { class: "pill " + l.status, text: l.status })),
      el("td", { text: fmtTime(l.created) }),
      el("td", { class: "buttons" },
        l.status === "proposed" ? el("button", { type: "button", class: "ok", "data-action": "confirm",
          "data-testid": "link-confirm", text: "Confirm", onclick: () => decide("confirm", l.id) }) : null,
        ["proposed", "confirmed"].includes(l.status) ? el("button", { type: "button", class: "bad", "data-action": "reject",
          "data-testid": "link-reject", text: "Reject", onclick: () => decide("reject", l.id) }) : null)));
    $("link-rows").replaceChildren(...rows);
    if (!rows.length) $("link-rows").append(el("tr", {}, el("td", { colspan: 7, class: "note", text: "No links: every tracklet is its own." })));
  }

  async function split() {
    if (!state.identity) return;
    const ids = [...state.selected].sort((a, b) => a - b);
    if (!ids.length) throw new ApiError(0, "Tick the tracklets to split off first.");
    const d = await postJSON(`/api/identities/${state.identity.id}/split`, { tracklets: ids });
    remember(d);
    state.selected = new Set();
    await loadIdentity(state.identity.id, true);
    status(`Decision #${d.id}: tracklet(s) ${ids.join(", ")} split off as identity #${d.new_identity}.`, "ok");
    updateQueueCount().catch(() => {});
  }

  async function merge() {
    if (!state.identity) return;
    const other = parseInt($("merge-other").value, 10);
    if (!(other > 0)) throw new ApiError(0, "Give the number of the identity to merge into this one.");
    const d = await postJSON("/api/identities/merge", { keep: state.identity.id, other });
    remember(d);
    $("merge-other").value = "";
    await loadIdentity(state.identity.id, true);
    status(`Decision #${d.id}: identity #${other} merged into #${state.identity.id}.`, "ok");
    updateQueueCount().catch(() => {});
  }

  // -- decisions and undo ------------------------------------------------------------------------------
  function undoStack() {
    try { return JSON.parse(sessionStorage.getItem(UNDO_KEY) || "[]"); } catch (e) { return []; }
  }
  function remember(decision) {
    const stack = undoStack();
    stack.push(decision.id);
    sessionStorage.setItem(UNDO_KEY, JSON.stringify(stack.slice(-200)));
  }

  async function refreshAfterDecision() {
    if (state.view === "review") await loadReview(true);
    else if (state.view === "identity" && state.identity) await loadIdentity(state.identity.id, true);
    updateQueueCount().catch(() => {});
  }

  // Decisions run one after another, each on the state its predecessor left: a key pressed twice
  // quickly acts on the link selected when its turn comes, not twice on the same link.
  let pending = Promise.resolve();
  function serially(job) {
    const run = pending.then(job).catch(fail);
    pending = run;
    return run;
  }

  /** Confirm or reject a link (from the queue or an identity's links); `linkId` a number, or a function
   * that gives it when the decision's turn comes (the queue's selected link, for keys). */
  function decide(kind, linkId) {
    return serially(async () => {
      const id = typeof linkId === "function" ? linkId() : linkId;
      if (id === undefined || id === null) return;
      const d = await postJSON(`/api/links/${id}/${kind}`);
      remember(d);
      await refreshAfterDecision();
      status(`Decision #${d.id}: link #${id} ${kind === "confirm" ? "confirmed" : "rejected"}. (u: undo)`, "ok");
    });
  }

  async function undoNow(decisionId) {
    const forget = () => sessionStorage.setItem(UNDO_KEY, JSON.stringify(undoStack().filter((x) => x !== decisionId)));
    let d;
    try {
      d = await postJSON(`/api/decisions/${decisionId}/undo`);
    } catch (e) {
      if (e.code === 409 && /already undone/.test(e.detail)) forget();  // undone elsewhere: next u goes further back
      if (e.code === 404) forget();
      throw e;
    }
    forget();
    await refreshAfterDecision();
    status(`Decision #${decisionId} undone (decision #${d.id}).`, "ok");
  }

  const undo = (decisionId) => serially(() => undoNow(decisionId));

  /** Undo the last decision made in this tab that still stands. */
  function undoLast() {
    return serially(async () => {
      const stack = undoStack();
      if (!stack.length) {
        status("Nothing to undo from this tab; the decision log under Review has an Undo button per decision.", "info");
        return;
      }
      await undoNow(stack[stack.length - 1]);
    });
  }

  function describe(d) {
    const p = d.payload || {};
    const r = p.request || {};
    const moved = Object.entries(p.tracklets || {});
    switch (d.kind) {
      case "confirm": return `link #${r.link} confirmed`;
      case "reject": return `link #${r.link} rejected` +
        (moved.length ? `; tracklet #${moved[0][0]} → new identity #${moved[0][1][1]}` : "");
      case "split": return `identity #${r.identity}: tracklet(s) ${(r.tracklets || []).map((t) => "#" + t).join(", ")} → identity #${r.new_identity}`;
      case "merge": return `identity #${r.other} merged into #${r.keep} (${moved.length} tracklet(s))`;
      case "undo": return `undid decision #${d.undoes}`;
      default: return d.kind;
    }
  }

  // -- review queue -----------------------------------------------------------------------------------
  async function loadReview(keepPlace) {
    const [links, log] = await Promise.all([getJSON("/api/links?limit=100"), getJSON("/api/decisions?limit=50")]);
    state.queue = links;
    if (!keepPlace) state.current = 0;
    state.current = Math.max(0, Math.min(state.current, links.length - 1));
    drawQueue();
    drawDecisions(log);
    setQueueCount(links.length);
    if (!keepPlace) status(`${links.length} proposed link(s) to review.`, "ok");
  }

  function drawQueue() {
    const box = $("queue");
    box.replaceChildren(...state.queue.map((l, i) => el("article", {
      class: "card link-card" + (i === state.current ? " current" : ""), "data-testid": "link-card",
      "data-link": l.id, "data-tracklet": l.tracklet, "data-identity": l.identity, "data-index": i,
      onclick: (e) => { if (!e.target.closest("button, a")) select(i); } },
      el("div", { class: "pair" },
        el("figure", {}, cropImg(l.crop, `tracklet ${l.tracklet}`),
          el("figcaption", {}, el("strong", { text: `tracklet #${l.tracklet}` }),
            el("div", { text: `cam ${l.camera} · ${fmtTime(l.start)}` }))),
        el("div", { class: "score", "data-testid": "link-score", title: "the linker's score (cosine similarity)" },
          el("small", { text: "score" }), fmtScore(l.score)),
        el("figure", {}, cropImg(l.identity_crop, `identity ${l.identity}`),
          el("figcaption", {}, el("a", { href: `#identity/${l.identity}`, text: `identity #${l.identity}` }),
            el("div", { text: l.identity_camera === null ? "no other crop" : `cam ${l.identity_camera}` })))),
      el("div", { class: "buttons" },
        el("span", { class: "linkid", text: `link #${l.id}` }),
        el("button", { type: "button", class: "ok", "data-action": "confirm", "data-testid": "queue-confirm",
                       onclick: () => decide("confirm", l.id) }, "Confirm ", el("kbd", { text: "y" })),
        el("button", { type: "button", class: "bad", "data-action": "reject", "data-testid": "queue-reject",
                       onclick: () => decide("reject", l.id) }, "Reject ", el("kbd", { text: "n" }))))));
    if (!state.queue.length) box.append(el("p", { class: "note empty", "data-testid": "queue-empty",
                                                  text: "Nothing to review: no proposed links." }));
  }

  function select(i) {
    if (!state.queue.length) return;
    state.current = Math.max(0, Math.min(i, state.queue.length - 1));
    document.querySelectorAll("#queue .link-card").forEach((c, j) => c.classList.toggle("current", j === state.current));
    const card = document.querySelector("#queue .link-card.current");
    if (card) card.scrollIntoView({ block: "nearest" });
  }

  function drawDecisions(log) {
    const undone = new Set(log.filter((d) => d.undoes !== null).map((d) => d.undoes));
    $("decision-rows").replaceChildren(...log.map((d) => el("tr", {
      "data-decision": d.id, "data-kind": d.kind, "data-testid": "decision-row", class: undone.has(d.id) ? "undone" : "" },
      el("td", { text: `#${d.id}` }),
      el("td", {}, el("span", { class: "pill " + d.kind, text: d.kind })),
      el("td", { text: describe(d) + (undone.has(d.id) ? " (undone)" : "") }),
      el("td", { text: d.by }),
      el("td", { text: fmtTime(d.created) }),
      el("td", {}, d.kind === "undo" || undone.has(d.id) ? null : el("button", {
        type: "button", class: "quiet", "data-action": "undo", "data-testid": "decision-undo",
        text: "Undo", onclick: () => undo(d.id) })))));
    if (!log.length) $("decision-rows").append(el("tr", {}, el("td", { colspan: 6, class: "note", text: "No decisions yet." })));
  }

  function setQueueCount(n) {
    $("queue-count").textContent = n ? String(n) : "";
  }
  async function updateQueueCount() {
    if (!getToken()) return;
    const links = await getJSON("/api/links?limit=500");
    setQueueCount(links.length >= 500 ? "500+" : links.length);
  }

  // -- keys -------------------------------------------------------------------------------------------
  function onKey(e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName))) return;
    if (state.view !== "review") return;
    const selected = () => (state.queue[state.current] || {}).id;
    switch (e.key) {
      case "y": decide("confirm", selected); break;
      case "n": decide("reject", selected); break;
      case "u": undoLast(); break;
      case "j": case "ArrowDown": select(state.current + 1); break;
      case "k": case "ArrowUp": select(state.current - 1); break;
      default: return;
    }
    e.preventDefault();
  }

  // -- wiring -----------------------------------------------------------------------------------------
  function start() {
    for (const n of document.querySelectorAll(".tz")) n.textContent = tzLabel();
    document.addEventListener("securitypolicyviolation", (e) =>
      status(`Blocked by the page's security policy: ${e.violatedDirective} ${e.blockedURI}`, "error"));
    $("token-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const token = $("token").value.trim();
      if (!token) { status("Paste a token into the box first.", "error"); return; }
      useToken(token).then((ok) => { if (ok) { route(); updateQueueCount().catch(() => {}); } });
    });
    $("token-forget").addEventListener("click", () => { useToken(""); });
    $("search-form").addEventListener("submit", (e) => { e.preventDefault(); searchByImage().catch(fail); });
    $("search-sighting-btn").addEventListener("click", () => searchBySighting().catch(fail));
    $("search-sighting").addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); searchBySighting().catch(fail); }
    });
    $("search-file").addEventListener("change", () => {
      const file = $("search-file").files[0];
      showPreview(file ? URL.createObjectURL(file) : null, true);
    });
    $("identity-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const id = parseInt($("identity-input").value, 10);
      if (id > 0) {
        if (location.hash === `#identity/${id}`) loadIdentity(id).catch(fail);
        else location.hash = `#identity/${id}`;
      } else status("Give an identity number.", "error");
    });
    $("split-btn").addEventListener("click", () => serially(split));
    $("merge-btn").addEventListener("click", () => serially(merge));
    $("undo-last").addEventListener("click", () => undoLast());
    $("identity-undo").addEventListener("click", () => undoLast());
    $("queue-refresh").addEventListener("click", () => loadReview().catch(fail));
    document.addEventListener("keydown", onKey);
    window.addEventListener("hashchange", route);

    const token = getToken();
    if (token) {
      useToken(token).then((ok) => { route(); if (ok) updateQueueCount().catch(() => {}); });
    } else {
      route();
      status("Enter a token to start (tools/serve.py prints one on first start).", "info");
      $("token").focus();
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
