// The session page's transcript grows without a reload: every second this asks the console
// what changed and puts in the messages it sends (HTML the server built and escaped).
"use strict";
(function () {
  const transcript = document.getElementById("transcript");
  const status = document.getElementById("status");
  if (!transcript || !status) {
    return;
  }
  let length = Number(transcript.dataset.length);
  let version = transcript.dataset.version;

  function apply(answer) {
    status.innerHTML = answer.status;
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
    return true;
  }

  async function poll() {
    let again = true;
    try {
      const query = "&from=" + length + "&v=" + encodeURIComponent(version);
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

  window.setTimeout(poll, 1000);
})();
