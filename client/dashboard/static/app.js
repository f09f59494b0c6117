/* tidemq dashboard front end: hash routes, one render function per page, the JSON API of
 * server.py. Text always goes in with textContent (names and bodies are user data).
 *
 * Routes: #/cluster, #/topics, #/topics/NAME, #/groups, #/groups/NAME, #/producers, #/rocketmq5, #/messages,
 * #/charts, #/brokers (configuration), #/acl. A read-only dashboard shows no control that
 * would change the cluster (whenWritable).
 * When a page has drawn its data, <body data-loaded="PAGE"> is set (the browser tests wait on
 * it); failures show in #notice. */
"use strict";

let overview = { namesrv: "", writable: false, why: "" };
let chartTimer = null;
let carriedNotice = null; /* shown on the next page (after a delete) instead of cleared */

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick" || k === "onsubmit" || k === "onchange") node[k] = v;
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(method, path, body) {
  const options = { method, headers: {} };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  let data;
  try { data = await response.json(); } catch (e) { data = { error: response.statusText }; }
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

function notify(text, ok) {
  const box = document.getElementById("notice");
  box.textContent = text;
  box.className = ok ? "notice ok" : "notice";
  box.hidden = !text;
}

const time = isoTime; /* chart.js: one format for tables and charts */

/* The controls that change the cluster, or nothing on a read-only dashboard (the reason is in
 * the header). */
/* Spread it into append() (which takes nodes, not arrays): main.append(...whenWritable(a, b)). */
function whenWritable(...nodes) { return overview.writable ? nodes : []; }

function localInput(ms) {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 19);
}

function num(v) { return v === null || v === undefined ? "" : Number(v).toLocaleString(); }

/* columns: [title, (row) => cell, "num"?]; a cell is text or a node. */
function table(id, columns, rows) {
  const head = el("tr", {}, columns.map(([title, , kind]) => el("th", { class: kind || null }, title)));
  const body = rows.map((row) => el("tr", {},
    columns.map(([, get, kind]) => el("td", { class: kind || null }, get(row)))));
  if (rows.length === 0) {
    body.push(el("tr", {}, el("td", { colspan: columns.length, class: "muted" }, "none")));
  }
  return el("table", { id }, el("thead", {}, head), el("tbody", {}, body));
}

function loaded(page) { document.body.dataset.loaded = page; }

async function action(work, success) {
  try {
    const result = await work();
    notify(typeof success === "function" ? success(result) : success, true);
    return result;
  } catch (e) {
    notify(e.message, false);
    return null;
  }
}

function field(form, name) { return form.elements[name].value.trim(); }

/* --- cluster ---------------------------------------------------------------------------- */

async function clusterPage(main) {
  const data = await api("GET", "/api/cluster");
  const role = (b) => b.error ? el("span", { class: "tag bad" }, "unreachable")
    : el("span", { class: `tag ${b.brokerId === 0 ? "master" : "slave"}` }, b.role);
  // The broker's own verdict (its GET /health): a red marker with the reasons when it is not
  // serving (dispatch stuck, disk refused, no slave in sync), amber when it serves without
  // something (quarantined queues, undeliverable delayed messages).
  const health = (b) => {
    if (b.error || !b.health) return "";
    if (b.health !== "serving") return el("span", { class: "tag bad stall", title: b.health }, b.health);
    if (b.healthNotes) return el("span", { class: "tag warn", title: b.healthNotes }, `serving; ${b.healthNotes}`);
    return el("span", { class: "tag" }, "serving");
  };
  main.append(
    el("h1", {}, "Cluster"),
    el("p", { class: "muted" }, `Name server ${overview.namesrv}. TPS: the broker's 10-second average.`),
    table("brokers", [
      ["Cluster", (b) => b.cluster],
      ["Broker", (b) => b.brokerName],
      ["ID", (b) => b.brokerId, "num"],
      ["Address", (b) => b.address],
      ["Role", role],
      ["Health", health, "wrap"],
      ["Version", (b) => b.error ? b.error : `${b.version} (tidemq ${b.tidemqVersion})`],
      ["In TPS", (b) => b.error ? "" : b.inTps.toFixed(2), "num"],
      ["Out TPS", (b) => b.error ? "" : b.outTps.toFixed(2), "num"],
      ["Put today", (b) => num(b.putTotal), "num"],
      ["Get today", (b) => num(b.getTotal), "num"],
      ["Disk used", (b) => b.error ? "" : `${(b.diskRatio * 100).toFixed(1)} %`, "num"],
      ["Disk", (b) => b.diskCapacity || "", "wrap"],
      ["HA lag (bytes)", (b) => b.haLagBytes === null || b.haLagBytes === undefined ? "" : num(b.haLagBytes), "num"],
      ["Dispatch behind (bytes)", (b) => b.error ? "" : num(b.dispatchBehindBytes || 0), "num"],
      ["Timers pending", (b) => b.error ? "" : num(b.timersPending || 0), "num"],
    ], data.brokers),
    el("h2", {}, "HA connections (master side)"),
    table("ha", [
      ["Broker", (c) => c.brokerName],
      ["Master", (c) => c.master],
      ["Slave", (c) => c.slave],
      ["Connection", (c) => c.slaveAddr],
      ["Slave ack offset", (c) => num(c.ackOffset), "num"],
      ["Behind (bytes)", (c) => num(c.diff), "num"],
      ["State", (c) => c.inSync ? "in sync" : "falling behind"],
      ["Transfer KB/s", (c) => c.transferKBps, "num"],
    ], data.haConnections),
  );
  loaded("cluster");
}

/* --- topics ----------------------------------------------------------------------------- */

/* The create/update form: `initial` may name the topic (then fixed), its queue numbers and perm;
 * clusterChoice offers "every cluster" first. */
function topicForm(id, clusters, initial) {
  const perm = (initial.perm || "RW").replace(/[-X]/g, "") || "RW";
  const clusterOptions = (initial.clusterChoice ? [el("option", { value: "" }, "every cluster")] : [])
    .concat(clusters.map((c) => el("option", { value: c }, c)));
  const form = el("form", { class: "inline", id },
    el("label", {}, "Topic", el("input", { name: "topic", required: true, value: initial.topic || null,
                                           readonly: Boolean(initial.topic) })),
    el("label", {}, "Cluster", el("select", { name: "cluster" }, clusterOptions)),
    el("label", {}, "Read queues", el("input", { name: "readQueueNums", type: "number", min: "1",
                                                 value: String(initial.readQueueNums || 8) })),
    el("label", {}, "Write queues", el("input", { name: "writeQueueNums", type: "number", min: "1",
                                                  value: String(initial.writeQueueNums || 8) })),
    el("label", {}, "Perm", el("select", { name: "perm" },
      ["RW", "R", "W"].map((p) => el("option", { value: p, selected: p === perm }, p)))),
    el("button", { type: "submit" }, initial.topic ? "Update" : "Create / update"));
  form.onsubmit = async (event) => {
    event.preventDefault();
    const done = await action(() => api("POST", "/api/topics", {
      topic: field(form, "topic"), cluster: field(form, "cluster"), perm: field(form, "perm"),
      readQueueNums: Number(field(form, "readQueueNums")),
      writeQueueNums: Number(field(form, "writeQueueNums")),
    }), (r) => `topic ${r.topic} saved on ${r.brokers.join(", ")}`);
    if (done) { const keep = document.getElementById("notice").textContent; await render(); notify(keep, true); }
  };
  return form;
}

async function topicsPage(main) {
  const data = await api("GET", "/api/topics");
  const showAll = sessionStorage.getItem("showSystemTopics") === "1";
  const rows = data.topics.filter((t) => showAll || t.kind === "normal" || t.kind === "dlq");
  const form = topicForm("topic-form", data.clusters, { clusterChoice: true });
  const toggle = el("input", { type: "checkbox", id: "show-system", checked: showAll });
  toggle.onchange = () => { sessionStorage.setItem("showSystemTopics", toggle.checked ? "1" : "0"); render(); };
  main.append(
    el("h1", {}, "Topics"),
    ...whenWritable(el("div", { class: "panel" }, form)),
    el("p", {}, el("label", { style: "flex-direction: row; gap: 6px" }, toggle, "show system and retry topics")),
    table("topics", [
      ["Topic", (t) => el("a", { href: `#/topics/${encodeURIComponent(t.topic)}` }, t.topic)],
      ["Kind", (t) => t.kind],
    ], rows),
  );
  loaded("topics");
}

async function topicPage(main, topic) {
  const data = await api("GET", `/api/topics/${encodeURIComponent(topic)}`);
  const send = el("form", { class: "inline", id: "send-form" },
    el("label", {}, "Body", el("input", { name: "body", value: "hello from the dashboard", size: "40" })),
    el("label", {}, "Tags", el("input", { name: "tags" })),
    el("label", {}, "Keys", el("input", { name: "keys" })),
    el("button", { type: "submit" }, "Send test message"));
  send.onsubmit = async (event) => {
    event.preventDefault();
    const done = await action(() => api("POST", `/api/topics/${encodeURIComponent(topic)}/send`, {
      body: field(send, "body"), tags: field(send, "tags"), keys: field(send, "keys"),
    }), (r) => `sent: ${r.status} offset msgId ${r.offsetMsgId} to ${r.brokerName} queue ${r.queueId} offset ${r.queueOffset}`);
    if (done) { const keep = document.getElementById("notice").textContent; await render(); notify(keep, true); }
  };
  const confirm = el("button", { type: "button", class: "danger", id: "confirm-delete", hidden: true },
    `Really delete ${topic}`);
  confirm.onclick = async () => {
    const done = await action(() => api("DELETE", `/api/topics/${encodeURIComponent(topic)}`),
      `topic ${topic} deleted`);
    if (done) { carriedNotice = `topic ${topic} deleted`; location.hash = "#/topics"; }
  };
  const remove = el("button", { type: "button", class: "secondary", id: "delete-topic" }, "Delete topic");
  remove.onclick = () => { confirm.hidden = false; };
  main.append(
    el("h1", {}, `Topic ${topic}`),
    el("p", {}, `${num(data.messages)} messages in its queues. Consumed by: `,
      data.groups.length ? data.groups.map((g, i) => [i ? ", " : "",
        el("a", { href: `#/groups/${encodeURIComponent(g)}` }, g)]) : "no group",
      " · ", el("a", { href: `#/messages?topic=${encodeURIComponent(topic)}` }, "browse messages")),
    el("h2", {}, "Route"),
    table("route-brokers", [
      ["Broker", (b) => b.brokerName],
      ["Cluster", (b) => b.cluster],
      ["Addresses (id: address)", (b) => Object.entries(b.addresses).map(([i, a]) => `${i}: ${a}`).join(", ")],
    ], data.route.brokers),
    table("route-queues", [
      ["Broker", (q) => q.brokerName],
      ["Read queues", (q) => q.readQueueNums, "num"],
      ["Write queues", (q) => q.writeQueueNums, "num"],
      ["Perm", (q) => q.perm],
    ], data.route.queues),
    el("h2", {}, "Queues"),
    table("queues", [
      ["Broker", (q) => q.brokerName],
      ["Queue", (q) => q.queueId, "num"],
      ["Min offset", (q) => q.minOffset, "num"],
      ["Max offset", (q) => q.maxOffset, "num"],
      ["Last stored", (q) => time(q.lastUpdateTimestamp)],
    ], data.queues),
    ...whenWritable(
      el("h2", {}, "Update"),
      el("div", { class: "panel" }, topicForm("update-form",
        [...new Set(data.route.brokers.map((b) => b.cluster))].sort(),
        { topic, ...(data.route.queues[0] || {}) })),
      el("h2", {}, "Send a test message"),
      el("div", { class: "panel" }, send),
      el("p", {}, remove, " ", confirm)),
  );
  loaded("topic");
}

/* --- consumer groups -------------------------------------------------------------------- */

async function groupsPage(main) {
  const data = await api("GET", "/api/groups");
  const showAll = sessionStorage.getItem("showSystemGroups") === "1";
  const toggle = el("input", { type: "checkbox", id: "show-system", checked: showAll });
  toggle.onchange = () => { sessionStorage.setItem("showSystemGroups", toggle.checked ? "1" : "0"); render(); };
  main.append(
    el("h1", {}, "Consumer groups"),
    el("p", {}, el("label", { style: "flex-direction: row; gap: 6px" }, toggle, "show system groups")),
    table("groups", [
      ["Group", (g) => el("a", { href: `#/groups/${encodeURIComponent(g.group)}` }, g.group)],
      ["Members", (g) => g.members, "num"],
      ["Type", (g) => g.consumeType || (g.system ? "system" : "offline")],
      ["Model", (g) => g.messageModel],
      ["Lag", (g) => num(g.diffTotal), "num"],
    ], data.groups.filter((g) => showAll || !g.system)),
  );
  loaded("groups");
}

async function groupPage(main, group) {
  const data = await api("GET", `/api/groups/${encodeURIComponent(group)}`);
  const topicSelect = () => el("select", { name: "topic" }, data.topics.map((t) => el("option", { value: t }, t)));
  const reset = el("form", { class: "inline", id: "reset-form" },
    el("label", {}, "Topic", topicSelect()),
    el("label", {}, "To the messages stored from",
      el("input", { name: "time", type: "datetime-local", step: "1", value: localInput(Date.now() - 3600000) })),
    el("button", { type: "submit" }, "Reset offset"));
  reset.onsubmit = async (event) => {
    event.preventDefault();
    const timestamp = new Date(field(reset, "time")).getTime();
    const done = await action(() => api("POST", `/api/groups/${encodeURIComponent(group)}/reset`,
      { topic: field(reset, "topic"), timestamp }),
      (r) => `offsets of ${group} on ${r.topic} reset: ` + r.offsets.map((o) => `${o.brokerName}/${o.queueId}→${o.offset}`).join(", "));
    if (done) { const keep = document.getElementById("notice").textContent; await render(); notify(keep, true); }
  };
  const skip = el("form", { class: "inline", id: "skip-form" },
    el("label", {}, "Topic", topicSelect()),
    el("button", { type: "submit", class: "secondary" }, "Skip backlog"));
  skip.onsubmit = async (event) => {
    event.preventDefault();
    const done = await action(() => api("POST", `/api/groups/${encodeURIComponent(group)}/skip`,
      { topic: field(skip, "topic") }), (r) => `backlog of ${group} on ${r.topic} skipped`);
    if (done) { const keep = document.getElementById("notice").textContent; await render(); notify(keep, true); }
  };
  main.append(
    el("h1", {}, `Consumer group ${group}`),
    el("p", {}, data.online ? `${data.members.length} member(s) online` : "offline (no member connected)",
      ". Lag: ", el("strong", { id: "lag-total" }, num(data.diffTotal)), " messages."),
    el("h2", {}, "Members"),
    table("members", [
      ["Client id", (m) => m.clientId],
      ["Address", (m) => m.clientAddr],
      ["Language", (m) => m.language],
      ["Version", (m) => m.version, "num"],
    ], data.members),
    el("h2", {}, "Subscriptions"),
    table("subscriptions", [["Topic", (s) => s.topic], ["Expression", (s) => s.expression]], data.subscriptions),
    el("h2", {}, "Lag per queue"),
    table("lag", [
      ["Topic", (q) => q.topic],
      ["Broker", (q) => q.brokerName],
      ["Queue", (q) => q.queueId, "num"],
      ["Broker offset", (q) => q.brokerOffset, "num"],
      ["Consumer offset", (q) => q.consumerOffset, "num"],
      ["Lag", (q) => q.diff, "num"],
      ["Last consumed", (q) => time(q.lastTimestamp)],
    ], data.queues),
    ...whenWritable(
      el("h2", {}, "Reset offset"),
      el("div", { class: "panel" }, reset, el("div", { style: "height: 10px" }), skip)),
  );
  loaded("group");
}

/* --- messages --------------------------------------------------------------------------- */

function messageRows(id, messages) {
  return table(id, [
    ["Message id", (m) => el("a", { href: "#", "data-offset-id": m.offsetMsgId,
      onclick: (e) => { e.preventDefault(); showMessage(m.offsetMsgId, ""); } }, m.msgId)],
    ["Topic", (m) => m.topic],
    ["Tags", (m) => m.tags],
    ["Keys", (m) => m.keys],
    ["Broker", (m) => m.brokerName],
    ["Queue", (m) => m.queueId, "num"],
    ["Offset", (m) => m.queueOffset, "num"],
    ["Stored", (m) => time(m.storeTimestamp)],
    ["Size", (m) => m.bodySize, "num"],
  ], messages);
}

async function showMessage(id, topic) {
  const box = document.getElementById("message-detail");
  const query = `id=${encodeURIComponent(id)}` + (topic ? `&topic=${encodeURIComponent(topic)}` : "");
  let m;
  try { m = await api("GET", `/api/messages/by-id?${query}`); } catch (e) { notify(e.message); return; }
  notify("");
  const props = Object.entries(m.properties).map(([k, v]) => `${k}=${v}`).join("  ");
  const fields = [
    ["Message id", m.msgId], ["Offset message id", m.offsetMsgId], ["Topic", m.topic],
    ["Tags", m.tags], ["Keys", m.keys], ["Queue", `${m.queueId} at offset ${m.queueOffset}`],
    ["Born", `${time(m.bornTimestamp)} from ${m.bornHost}`], ["Stored", `${time(m.storeTimestamp)} on ${m.storeHost}`],
    ["Reconsume times", m.reconsumeTimes], ["Size", `${m.bodySize} bytes`], ["Properties", props],
  ];
  const children = [
    el("h2", {}, "Message"),
    el("dl", { class: "fields" }, fields.map(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))])),
    el("h2", {}, m.bodyTruncated ? "Body (first 2 KiB)" : "Body"),
    el("pre", { class: "body", id: "message-body" }, m.body),
  ];
  if (m.deadLetter && overview.writable) {
    const origin = m.properties.RETRY_TOPIC || "its topic";
    const resend = el("button", { type: "button", id: "resend" }, `Resend to ${origin}`);
    resend.onclick = () => action(() => api("POST", "/api/messages/resend", { msgId: m.offsetMsgId }),
      (r) => `resent to ${origin}: offset msgId ${r.offsetMsgId} (${r.brokerName} queue ${r.queueId} offset ${r.queueOffset})`);
    children.push(el("p", {}, resend));
  }
  const trace = el("div", { id: "message-trace" }, el("p", {}, "Reading its trace..."));
  children.push(el("h2", {}, "Trace"), trace);
  box.replaceChildren(el("div", { class: "panel" }, children));
  box.dataset.msgId = m.msgId;
  box.scrollIntoView();
  showTrace(trace, m.msgId);
}

async function showTrace(box, msgId) {
  let t;
  try { t = await api("GET", `/api/messages/trace?id=${encodeURIComponent(msgId)}`); } catch (e) {
    box.replaceChildren(el("p", {}, `trace unavailable: ${e.message}`));
    return;
  }
  if (!t.records.length) {
    box.replaceChildren(el("p", {}, "No trace: its producer and consumers did not enable trace."));
    return;
  }
  box.replaceChildren(table("trace-table", [
    ["Type", (r) => r.type],
    ["Group", (r) => r.group],
    ["Time", (r) => time(r.timestamp)],
    ["Cost (ms)", (r) => (r.type === "SubBefore" ? "-" : r.costTime), "num"],
    ["Status", (r) => r.status],
    ["Detail", (r) => r.detail, "detail"],
  ], t.records));
}

async function messagesPage(main, params) {
  const topics = (await api("GET", "/api/topics")).topics;
  const topicList = el("datalist", { id: "topic-names" }, topics.map((t) => el("option", { value: t.topic })));
  const now = Date.now();
  const byTime = el("form", { class: "inline", id: "time-form" },
    el("label", {}, "Topic", el("input", { name: "topic", list: "topic-names", value: params.get("topic") || "", required: true })),
    el("label", {}, "From", el("input", { name: "begin", type: "datetime-local", step: "1", value: localInput(now - 3600000) })),
    el("label", {}, "To", el("input", { name: "end", type: "datetime-local", step: "1", value: localInput(now + 60000) })),
    el("label", {}, "Page size", el("input", { name: "pageSize", type: "number", value: "20", min: "1", max: "200" })),
    el("button", { type: "submit" }, "Search"));
  const byKey = el("form", { class: "inline", id: "key-form" },
    el("label", {}, "Topic", el("input", { name: "topic", list: "topic-names", value: params.get("topic") || "", required: true })),
    el("label", {}, "Key", el("input", { name: "key", required: true })),
    el("button", { type: "submit" }, "Search"));
  const byId = el("form", { class: "inline", id: "id-form" },
    el("label", {}, "Message id (offset id, or client id with a topic)", el("input", { name: "id", size: "36", required: true })),
    el("label", {}, "Topic (for client ids)", el("input", { name: "topic", list: "topic-names" })),
    el("button", { type: "submit" }, "Show"));
  const results = el("div", { id: "message-results" });
  const detail = el("div", { id: "message-detail" });
  let page = 1;
  const runTime = async () => {
    const query = new URLSearchParams({
      topic: field(byTime, "topic"), begin: new Date(field(byTime, "begin")).getTime(),
      end: new Date(field(byTime, "end")).getTime(), page, pageSize: field(byTime, "pageSize"),
    });
    let r;
    try { r = await api("GET", `/api/messages?${query}`); } catch (e) { notify(e.message); return; }
    notify("");
    const pages = Math.max(1, Math.ceil(r.total / r.pageSize));
    const prev = el("button", { type: "button", class: "secondary", id: "prev-page", disabled: page <= 1 }, "‹ Newer");
    const next = el("button", { type: "button", class: "secondary", id: "next-page", disabled: page >= pages }, "Older ›");
    prev.onclick = () => { page -= 1; runTime(); };
    next.onclick = () => { page += 1; runTime(); };
    results.replaceChildren(
      el("p", { id: "result-count" }, `${r.total} message(s)${r.truncated ? " (only the newest kept)" : ""}, page ${r.page} of ${pages}`),
      messageRows("messages", r.messages),
      el("div", { class: "pager" }, prev, next));
    results.dataset.total = r.total;
  };
  byTime.onsubmit = (event) => { event.preventDefault(); page = 1; runTime(); };
  byKey.onsubmit = async (event) => {
    event.preventDefault();
    let r;
    try {
      r = await api("GET", `/api/messages/by-key?topic=${encodeURIComponent(field(byKey, "topic"))}&key=${encodeURIComponent(field(byKey, "key"))}`);
    } catch (e) { notify(e.message); return; }
    notify("");
    results.replaceChildren(el("p", { id: "result-count" }, `${r.messages.length} message(s) with key ${r.key}`),
      messageRows("messages", r.messages));
    results.dataset.total = r.messages.length;
  };
  byId.onsubmit = (event) => { event.preventDefault(); showMessage(field(byId, "id"), field(byId, "topic")); };
  main.append(
    el("h1", {}, "Messages"), topicList,
    el("div", { class: "panel" }, el("h2", {}, "By topic and time"), byTime),
    el("div", { class: "panel" }, el("h2", {}, "By key"), byKey),
    el("div", { class: "panel" }, el("h2", {}, "By message id"), byId),
    results, detail,
  );
  if (params.get("topic")) await runTime();
  loaded("messages");
}

/* --- live charts ------------------------------------------------------------------------ */

async function chartsPage(main) {
  const panels = {
    brokerIn: ["Messages in per broker", "msg/s"],
    brokerOut: ["Messages out per broker", "msg/s"],
    topicIn: ["Messages in per topic", "msg/s"],
    groupLag: ["Lag per consumer group", "messages"],
  };
  const boxes = {};
  const grid = el("div", { class: "charts" });
  for (const [key, [title]] of Object.entries(panels)) {
    boxes[key] = el("div", { class: "chart-body", id: `chart-${key}` });
    grid.appendChild(el("div", { class: "panel chart" }, el("h2", {}, title), boxes[key]));
  }
  const status = el("p", { class: "muted", id: "chart-status" });
  main.append(el("h1", {}, "Live charts"), status, grid);
  const draw = async () => {
    let data;
    try { data = await api("GET", "/api/charts"); } catch (e) { status.textContent = e.message; return data; }
    for (const [key, [, unit]] of Object.entries(panels)) drawChart(boxes[key], data.times, data[key], unit);
    status.textContent = `A sample every ${data.interval} s; ${data.times.length} shown.` +
      (data.error ? ` Last sampling failed: ${data.error}` : "");
    return data;
  };
  const first = await draw();
  loaded("charts");
  chartTimer = setInterval(draw, Math.max(500, (first ? first.interval : 2) * 1000));
}

/* --- producers -------------------------------------------------------------------------- */

/* RocketMQ Dashboard's producer page: the connections of a producer group on a topic's masters
 * (producers register their group with the brokers of the topics they send to). */
async function producersPage(main, params) {
  const topics = (await api("GET", "/api/topics")).topics.filter((t) => t.kind === "normal");
  const form = el("form", { class: "inline", id: "producer-form" },
    el("label", {}, "Topic", el("select", { name: "topic" }, topics.map((t) =>
      el("option", { value: t.topic, selected: t.topic === params.get("topic") }, t.topic)))),
    el("label", {}, "Producer group", el("input", { name: "group", required: true,
                                                     value: params.get("group") || "" })),
    el("button", { type: "submit" }, "Search"));
  const results = el("div", { id: "producer-results" });
  form.onsubmit = (event) => {
    event.preventDefault();
    const query = new URLSearchParams({ topic: field(form, "topic"), group: field(form, "group") });
    location.hash = `#/producers?${query}`;
  };
  main.append(el("h1", {}, "Producers"), el("div", { class: "panel" }, form), results);
  if (params.get("topic") && params.get("group")) {
    const r = await api("GET", `/api/producers?${new URLSearchParams({
      topic: params.get("topic"), group: params.get("group") })}`);
    results.append(
      el("p", { id: "producer-count" }, `${r.producers.length} producer(s) of ${r.group} connected to the masters of ${r.topic}`),
      table("producers", [
        ["Client id", (c) => c.clientId],
        ["Address", (c) => c.clientAddr],
        ["Language", (c) => c.language],
        ["Version", (c) => c.version, "num"],
      ], r.producers));
  }
  loaded("producers");
}

/* --- RocketMQ 5 side -------------------------------------------------------------------- */

/* What RocketMQ's own Dashboard does not show: the 5.x clients connected over gRPC (language
 * and version as their settings name them), POP consumption per queue (in flight, still
 * invisible, acknowledged) and timer messages waiting per topic. */
async function rocketmq5Page(main) {
  const r = await api("GET", "/api/rocketmq5");
  main.append(
    el("h1", {}, "RocketMQ 5 clients"),
    el("h2", {}, "Clients (gRPC)"),
    el("p", { id: "grpc-client-count" }, `${r.clients.length} 5.x client(s) connected`),
    table("grpc-clients", [
      ["Client id", (c) => c.clientId],
      ["Type", (c) => c.clientType],
      ["Group", (c) => c.group || "-"],
      ["Topics", (c) => c.topics.join(", ") || "-"],
      ["Language", (c) => c.language],
      ["Version", (c) => c.version],
      ["Address", (c) => c.clientAddr],
      ["Broker", (c) => c.brokerName],
      ["Last heartbeat", (c) => time(c.lastHeartbeatTimestamp)],
    ], r.clients),
    el("h2", {}, "POP consumer progress"),
    table("pop-progress", [
      ["Group", (q) => q.group],
      ["Topic", (q) => q.topic],
      ["Broker", (q) => q.brokerName],
      ["Queue", (q) => q.queueId, "num"],
      ["Broker offset", (q) => q.brokerOffset, "num"],
      ["Pop offset", (q) => q.popOffset, "num"],
      ["In flight", (q) => q.inFlight, "num"],
      ["Invisible", (q) => q.invisible, "num"],
      ["Acknowledged", (q) => q.acked, "num"],
    ], r.pop),
    el("h2", {}, "Timer messages waiting"),
    table("timer-topics", [
      ["Topic", (t) => t.topic],
      ["Broker", (t) => t.brokerName],
      ["Pending", (t) => t.pending, "num"],
      ["Last change", (t) => time(t.timeStamp)],
    ], r.timers));
  loaded("rocketmq5");
}

/* --- broker configuration --------------------------------------------------------------- */

async function brokersPage(main) {
  const data = await api("GET", "/api/brokers/config");
  main.append(el("h1", {}, "Broker configuration"));
  for (const b of data.brokers) {
    const title = `${b.brokerName}/${b.brokerId} ${b.address}`;
    if (b.error) {
      main.append(el("div", { class: "panel" }, el("h2", {}, title), el("p", { class: "muted" }, b.error)));
      continue;
    }
    const keys = Object.keys(b.config);
    const update = el("form", { class: "inline", "data-broker": b.address },
      el("label", {}, "Key", el("select", { name: "key" }, keys.map((k) => el("option", { value: k }, k)))),
      el("label", {}, "Value", el("input", { name: "value", size: "24" })),
      el("button", { type: "submit" }, "Update"));
    update.onsubmit = async (event) => {
      event.preventDefault();
      const done = await action(() => api("POST", "/api/brokers/config",
        { address: b.address, key: field(update, "key"), value: update.elements.value.value }),
        (r) => `${r.key} of ${r.address} is now ${r.value}`);
      if (done) { const keep = document.getElementById("notice").textContent; await render(); notify(keep, true); }
    };
    main.append(el("div", { class: "panel" }, el("h2", {}, title),
      whenWritable(update, el("div", { style: "height: 10px" })),
      table(`config-${b.brokerName}-${b.brokerId}`, [
        ["Key", (k) => k],
        ["Value", (k) => b.config[k], "wrap"],
      ], keys)));
  }
  loaded("brokers");
}

/* --- ACL -------------------------------------------------------------------------------- */

async function aclPage(main) {
  const data = await api("GET", "/api/acl");
  const state = (b) => el("span", { class: `tag ${b.acl === "on" ? "master" : b.acl === "off" ? "" : "bad"}` }, b.acl);
  main.append(
    el("h1", {}, "Access control"),
    el("p", { class: "muted" }, "Brokers with ACL check every request against the accounts of their " +
      "plain ACL file (RocketMQ 4.x plain ACL); the file lives on the broker's machine. " +
      `This dashboard is ${overview.writable ? "writable" : "read-only"}: ${overview.why}.`),
    table("acl", [
      ["Broker", (b) => `${b.brokerName}/${b.brokerId}`],
      ["Address", (b) => b.address],
      ["ACL", state],
      ["ACL file", (b) => b.error || b.aclFile || "", "wrap"],
    ], data.brokers),
  );
  loaded("acl");
}

/* --- routing ---------------------------------------------------------------------------- */

async function render() {
  if (chartTimer) { clearInterval(chartTimer); chartTimer = null; }
  const [path, queryText] = (location.hash.slice(1) || "/cluster").split("?");
  const params = new URLSearchParams(queryText || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const main = document.getElementById("page");
  delete document.body.dataset.loaded;
  for (const link of document.querySelectorAll("header nav a")) {
    link.classList.toggle("active", link.dataset.nav === parts[0]);
  }
  const fresh = el("div", { "data-page": parts.join("/") });
  main.replaceChildren(fresh);
  try {
    if (parts[0] === "topics" && parts[1]) await topicPage(fresh, parts[1]);
    else if (parts[0] === "topics") await topicsPage(fresh);
    else if (parts[0] === "groups" && parts[1]) await groupPage(fresh, parts[1]);
    else if (parts[0] === "groups") await groupsPage(fresh);
    else if (parts[0] === "messages") await messagesPage(fresh, params);
    else if (parts[0] === "charts") await chartsPage(fresh);
    else if (parts[0] === "producers") await producersPage(fresh, params);
    else if (parts[0] === "rocketmq5") await rocketmq5Page(fresh);
    else if (parts[0] === "brokers") await brokersPage(fresh);
    else if (parts[0] === "acl") await aclPage(fresh);
    else await clusterPage(fresh);
  } catch (e) {
    fresh.append(el("p", { class: "muted" }, "Could not load this page."));
    notify(e.message);
    loaded("error");
  }
}

window.addEventListener("hashchange", () => {
  notify(carriedNotice || "", Boolean(carriedNotice));
  carriedNotice = null;
  render();
});
window.addEventListener("DOMContentLoaded", async () => {
  try { overview = await api("GET", "/api/overview"); } catch (e) { notify(e.message); }
  const mode = document.getElementById("mode");
  mode.textContent = `name server ${overview.namesrv} · ${overview.writable ? "writable" : "read-only"}`;
  mode.title = overview.why || "";
  document.body.dataset.writable = overview.writable ? "yes" : "no";
  render();
});
