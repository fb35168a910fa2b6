// The console's one script. A region with data-live-url is fetched again every
// data-live-every seconds and its content replaced; keyboard focus stays on the same link or
// button. Without script every page still works: reload it.
"use strict";

function focusKey(element) {
  return element ? element.getAttribute("href") || element.id || null : null;
}

function liveRegion(region) {
  const every = Math.max(1, Number(region.dataset.liveEvery || 5)) * 1000;
  async function refresh() {
    try {
      const response = await fetch(region.dataset.liveUrl, { credentials: "same-origin" });
      if (response.ok) {
        const active = document.activeElement;
        const focused = region.contains(active) ? focusKey(active) : null;
        region.innerHTML = await response.text();
        region.dataset.refreshed = String(Date.now());
        if (focused) {
          const again = Array.from(region.querySelectorAll("a, button")).find(
            (element) => focusKey(element) === focused,
          );
          if (again) again.focus();
        }
      }
    } catch (error) {
      // The console or the network is away: the next refresh tries again.
    }
    window.setTimeout(refresh, every);
  }
  window.setTimeout(refresh, every);
}

document.querySelectorAll("[data-live-url]").forEach(liveRegion);
