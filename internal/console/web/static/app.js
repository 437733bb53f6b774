// loomd console: times in the viewer's zone, copy buttons, the theme
// switch, and live updates over one server-sent event stream per page.
// Served as a file (the Content-Security-Policy allows no inline script);
// every page works without it.
"use strict";
(function () {
  const root = document.documentElement;

  // Theme: the system's, unless the viewer chose one here.
  const saved = localStorage.getItem("loom-theme");
  if (saved === "light" || saved === "dark") root.dataset.theme = saved;
  function setupTheme() {
    const b = document.getElementById("theme");
    if (!b) return;
    const dark = () => root.dataset.theme === "dark" || (!root.dataset.theme && matchMedia("(prefers-color-scheme: dark)").matches);
    const label = () => { b.textContent = dark() ? "Light theme" : "Dark theme"; };
    b.hidden = false;
    label();
    b.addEventListener("click", () => {
      root.dataset.theme = dark() ? "light" : "dark";
      localStorage.setItem("loom-theme", root.dataset.theme);
      label();
    });
  }

  // Times: <time datetime="RFC 3339"> shown in the viewer's zone.
  const fmt = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });
  function localTimes(scope) {
    scope.querySelectorAll("time[datetime]").forEach((t) => {
      const d = new Date(t.getAttribute("datetime"));
      if (isNaN(d)) return;
      if (!t.title) t.title = t.textContent;
      t.textContent = fmt.format(d);
    });
  }

  // Copy buttons: data-copy holds the text (an id, a command).
  function copyButtons(scope) {
    scope.querySelectorAll("button.copy[data-copy]").forEach((b) => {
      b.hidden = !navigator.clipboard;
      if (b.dataset.bound) return;
      b.dataset.bound = "1";
      b.addEventListener("click", async () => {
        try {
          await navigator.clipboard.writeText(b.dataset.copy);
          const old = b.firstChild.textContent;
          b.firstChild.textContent = "Copied";
          setTimeout(() => { b.firstChild.textContent = old; }, 1500);
        } catch (e) { /* the text stays selectable */ }
      });
    });
  }

  function enhance(scope) { localTimes(scope); copyButtons(scope); }

  // Live updates. The server says which topic changed; the page fetches
  // itself and swaps every [data-live] region (escaped HTML, rendered by
  // the server). One fetch at a time; changes during a fetch cause one
  // more afterwards.
  // served holds each live region's HTML as the server last sent it
  // (before enhance() added times and buttons), to tell a real change.
  const served = new WeakMap();

  function live() {
    const topics = (document.body.dataset.topics || "").split(" ").filter(Boolean);
    const status = document.getElementById("live");
    if (!topics.length || !window.EventSource || !document.querySelector("[data-live]")) return;
    const url = "/ui/events?" + topics.map((t) => "topic=" + encodeURIComponent(t)).join("&");
    let busy = false, again = false;
    const show = (text) => { if (status) { status.hidden = false; status.textContent = text; } };
    async function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      try {
        const res = await fetch(location.href, { credentials: "same-origin", headers: { "X-Loom-Live": "1" } });
        if (res.redirected || !res.ok) { show("not live: reload the page"); return; }
        const doc = new DOMParser().parseFromString(await res.text(), "text/html");
        document.querySelectorAll("[data-live]").forEach((el) => {
          const fresh = doc.querySelector('[data-live="' + el.dataset.live + '"]');
          if (!fresh) return;
          // A region whose server HTML did not change is left alone: the
          // reader's selection, focus and place stay where they were.
          if (served.get(el) === fresh.innerHTML) return;
          served.set(el, fresh.innerHTML);
          const open = new Set([...el.querySelectorAll("details[open]")].map((d) => d.textContent.slice(0, 80)));
          // A followed box (a task's log) scrolled to its end stays at
          // its end as lines arrive; one scrolled up stays where it was.
          const follow = {};
          el.querySelectorAll("[data-follow]").forEach((b) => {
            follow[b.dataset.follow] = b.scrollTop + b.clientHeight >= b.scrollHeight - 8 ? -1 : b.scrollTop;
          });
          el.replaceChildren(...fresh.childNodes);
          el.querySelectorAll("details").forEach((d) => { if (open.has(d.textContent.slice(0, 80))) d.open = true; });
          el.querySelectorAll("[data-follow]").forEach((b) => {
            const at = follow[b.dataset.follow];
            b.scrollTop = at === undefined || at < 0 ? b.scrollHeight : at;
          });
          enhance(el);
        });
        document.dispatchEvent(new CustomEvent("loom:updated"));
      } catch (e) {
        show("not live: " + e.message);
      } finally {
        busy = false;
        if (again) { again = false; setTimeout(refresh, 200); }
      }
    }
    const es = new EventSource(url);
    es.addEventListener("open", () => show("live"));
    es.addEventListener("error", () => show("reconnecting…"));
    es.addEventListener("change", refresh);
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-live]").forEach((el) => served.set(el, el.innerHTML));
    setupTheme();
    enhance(document);
    document.querySelectorAll("[data-follow]").forEach((b) => { b.scrollTop = b.scrollHeight; });
    live();
  });
})();
