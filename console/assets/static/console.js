// meshd console: the only script, and the pages work without it. It keeps
// the live parts of a page fresh (an element with data-live="URL" is
// replaced every 2 s by the same element of the server-rendered fragment at
// URL) and adds copy buttons (data-copy="ID" copies the text of #ID).
"use strict";

(function () {
  const every = 2000;

  function live(el) {
    const url = el.dataset.live;
    const status = document.getElementById(el.id + "-status");
    let timer = 0;
    async function refresh() {
      if (document.hidden) {
        return;
      }
      let resp;
      try {
        resp = await fetch(url, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } });
      } catch (e) {
        say("live updates paused: meshctl ui does not answer");
        return;
      }
      const text = await resp.text();
      const doc = new DOMParser().parseFromString(text, "text/html");
      if (!resp.ok) {
        const code = doc.getElementById("problem-code");
        say("live updates stopped: " + (code ? code.textContent : "HTTP " + resp.status) + "; reload the page");
        clearInterval(timer);
        return;
      }
      const fresh = doc.getElementById(el.id);
      say("checked " + new Date().toLocaleTimeString());
      // Replace only on a change, so keyboard focus stays put meanwhile.
      // Both sides come from the same template through the same HTML
      // parser, so their markup is equal when nothing changed (comparing
      // with the previous answer instead replaced the page's own first
      // rendering on the first refresh, and dropped the focus).
      if (fresh && fresh.innerHTML !== el.innerHTML) {
        el.replaceChildren(...fresh.childNodes);
      }
    }
    function say(text) {
      if (status) {
        status.textContent = text;
      }
    }
    timer = setInterval(refresh, every);
    document.addEventListener("visibilitychange", refresh);
  }

  function copy(button) {
    const source = document.getElementById(button.dataset.copy);
    if (!source || !navigator.clipboard) {
      return;
    }
    button.hidden = false;
    button.addEventListener("click", async function () {
      try {
        await navigator.clipboard.writeText(source.textContent);
        button.textContent = "Copied";
      } catch (e) {
        button.textContent = "Copy failed: select the text";
      }
    });
  }

  document.querySelectorAll("[data-live]").forEach(live);
  document.querySelectorAll("button[data-copy]").forEach(copy);
})();
