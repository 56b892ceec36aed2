// meshd console: the only script, and the pages work without it. It keeps
// the live parts of a page fresh (an element with data-live="URL" is
// replaced every 2 s by the same element of the server-rendered fragment at
// URL), filters them as you type (a form with data-filter="ID" passes its
// q field on to #ID's URL) and adds copy buttons (data-copy="ID" copies the
// text of #ID).
"use strict";

(function () {
  const every = 2000;
  const refreshers = new Map(); // a live element → its refresh

  function live(el) {
    const status = document.getElementById(el.id + "-status");
    let timer = 0;
    async function refresh() {
      if (document.hidden) {
        return;
      }
      const url = el.dataset.live;
      let resp;
      try {
        resp = await fetch(url, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } });
      } catch (e) {
        say("live updates paused: meshctl ui does not answer");
        return;
      }
      const text = await resp.text();
      if (url !== el.dataset.live) {
        return; // the filter changed meanwhile: a newer refresh is under way
      }
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
    refreshers.set(el, refresh);
  }

  // filter makes a search form (GET, field q) filter the live element it
  // names as you type: the text goes into the element's data-live URL and
  // the page's address, and the element is refreshed at once. The server
  // does the matching, as it does for the form sent without the script.
  function filter(form) {
    const el = document.getElementById(form.dataset.filter);
    const input = form.elements.namedItem("q");
    const refresh = el && refreshers.get(el);
    if (!input || !refresh) {
      return;
    }
    let timer = 0;
    function apply() {
      clearTimeout(timer);
      const q = input.value.trim();
      const liveURL = new URL(el.dataset.live, location.href);
      const pageURL = new URL(location.href);
      for (const u of [liveURL, pageURL]) {
        if (q) {
          u.searchParams.set("q", q);
        } else {
          u.searchParams.delete("q");
        }
      }
      el.dataset.live = liveURL.pathname + liveURL.search;
      history.replaceState(null, "", pageURL.pathname + pageURL.search);
      refresh();
    }
    input.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(apply, 150);
    });
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      apply();
    });
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
  document.querySelectorAll("form[data-filter]").forEach(filter);
  document.querySelectorAll("button[data-copy]").forEach(copy);
})();
