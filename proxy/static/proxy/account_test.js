// The connection test page: streams /api/admin/accounts/test (server-sent events) into the page.
(function () {
  "use strict";
  const root = document.getElementById("account-test");
  if (!root) return;
  const output = document.getElementById("test-output");
  document.getElementById("test-run").addEventListener("click", function () {
    output.textContent = "";
    root.dataset.state = "running";
    const query = new URLSearchParams({ id: root.dataset.accountId, modelId: document.getElementById("test-model").value });
    const source = new EventSource(root.dataset.testUrl + "?" + query.toString());
    source.onmessage = function (message) {
      const event = JSON.parse(message.data);
      if (event.type === "content") output.textContent += event.text;
      else if (event.type === "test_start") output.textContent += event.text + "\n";
      else if (event.type === "test_complete") { output.textContent += "\n✔ success\n"; root.dataset.state = "success"; source.close(); }
      else if (event.type === "error") { output.textContent += "\n✘ " + event.error + "\n"; root.dataset.state = "error"; source.close(); }
    };
    source.onerror = function () { if (root.dataset.state === "running") { root.dataset.state = "error"; output.textContent += "\n✘ the stream broke\n"; } source.close(); };
  });
})();
