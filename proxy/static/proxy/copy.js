// Copy buttons: <button data-copy="element-id"> copies that element's text.
(function () {
  "use strict";
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    button.addEventListener("click", function () {
      const text = document.getElementById(button.dataset.copy).textContent;
      navigator.clipboard.writeText(text).then(
        function () { button.textContent = "Copied"; },
        function () { button.textContent = "Select and copy by hand"; }
      );
    });
  });
})();
