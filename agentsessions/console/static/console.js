// The first page of the sessions list follows the store without a reload: every two seconds
// it asks the console for the same page and puts in its rows and its filter counts (HTML the
// server built and escaped), so new sessions and changed states show as they happen.
"use strict";
(function () {
  const table = document.querySelector("table.sessions[data-refresh]");
  if (!table) {
    return;
  }
  const every = Number(table.dataset.refresh);

  async function refresh() {
    try {
      const response = await fetch(window.location.href, { credentials: "same-origin" });
      if (response.ok) {
        const page = new DOMParser().parseFromString(await response.text(), "text/html");
        const rows = page.querySelector("table.sessions tbody");
        const counts = page.querySelector("p.filters");
        const shown = document.querySelector("p.filters");
        if (rows && counts && shown) {
          table.tBodies[0].replaceWith(document.importNode(rows, true));
          shown.replaceWith(document.importNode(counts, true));
        }
      }
    } catch (error) {
      // The console restarting, or the network: try again at the next tick.
    }
    window.setTimeout(refresh, every);
  }

  window.setTimeout(refresh, every);
})();

// The session page follows the session without a reload: every second this asks the console
// what changed and puts in the messages it sends (HTML the server built and escaped), and
// keeps the actions true to the session: Cancel only while a run holds it, the fork's count
// at the whole transcript (unless someone chose another), the tool a run is running named,
// and the approvals panel as the wait stands (unless someone is filling in one of its forms:
// then a note says the wait changed, and the console refuses a decision it can no longer take).
(function () {
  const transcript = document.getElementById("transcript");
  const status = document.getElementById("status");
  if (!transcript || !status) {
    return;
  }
  const cancel = document.getElementById("cancel");
  const forkAt = document.getElementById("fork-at");
  const approvals = document.getElementById("approvals");
  let edited = false;
  if (approvals) {
    approvals.addEventListener("input", () => {
      edited = true;
    });
  }
  let length = Number(transcript.dataset.length);
  let version = transcript.dataset.version;

  function follow(newLength) {
    if (!forkAt) {
      return;
    }
    const whole = forkAt.value === forkAt.max;
    forkAt.max = String(newLength);
    if (whole) {
      forkAt.value = String(newLength);
    }
  }

  function showActivity() {
    const activity = status.querySelector(".activity");
    const last = transcript.lastElementChild;
    if (!activity || !last || transcript.dataset.state !== "running") {
      return;
    }
    const tools = Array.from(last.querySelectorAll(".in-doubt"), (node) => node.dataset.tool);
    if (tools.length > 0) {
      activity.textContent = "running the tool " + tools.join(", ");
    }
  }

  function mark() {
    const panel = approvals ? approvals.querySelector("[data-mark]") : null;
    return panel ? panel.dataset.mark : "";
  }

  function showApprovals(html) {
    if (!approvals || html === undefined) {
      return;
    }
    if (edited && html !== "") {
      if (!approvals.querySelector(".changed")) {
        approvals.insertAdjacentHTML(
          "afterbegin",
          '<p class="problem changed">These calls changed elsewhere meanwhile: reload to see them.</p>',
        );
      }
      return;
    }
    approvals.innerHTML = html;
    edited = false;
  }

  function apply(answer) {
    status.innerHTML = answer.status;
    showApprovals(answer.approvals_html);
    transcript.dataset.state = answer.state;
    if (cancel) {
      cancel.hidden = answer.state !== "running";
    }
    if (answer.gone) {
      transcript.classList.add("gone");
      return false;
    }
    if (answer.messages !== undefined) {
      for (const node of Array.from(transcript.children)) {
        if (Number(node.dataset.index) >= answer.start) {
          node.remove();
        }
      }
      transcript.insertAdjacentHTML("beforeend", answer.messages);
      length = answer.length;
      version = answer.version;
      transcript.dataset.length = String(length);
    }
    follow(answer.length);
    showActivity();
    return true;
  }

  async function poll() {
    let again = true;
    try {
      const query = "&from=" + length + "&v=" + encodeURIComponent(version) + "&a=" + encodeURIComponent(mark());
      const response = await fetch(transcript.dataset.poll + query, {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      if (response.ok) {
        again = apply(await response.json());
      }
    } catch (error) {
      // The console restarting, or the network: try again at the next tick.
    }
    if (again) {
      window.setTimeout(poll, 1000);
    }
  }

  showActivity();
  window.setTimeout(poll, 1000);
})();
