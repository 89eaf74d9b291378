// Sortable tables: click a column head (or press Enter on it) to sort by it; click again to
// reverse. Numbers sort by the cell's data-v value, text by what the cell shows.
(function () {
  "use strict";

  function keyOf(cell, numeric) {
    if (!numeric) {
      return cell.textContent.toLowerCase();
    }
    var v = parseFloat(cell.getAttribute("data-v"));
    return isNaN(v) ? -Infinity : v;
  }

  function sortTable(table, th, col) {
    var numeric = th.classList.contains("num");
    var current = th.getAttribute("aria-sort");
    var descending = current ? current === "ascending" : numeric;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = keyOf(a.cells[col], numeric);
      var y = keyOf(b.cells[col], numeric);
      var order = x < y ? -1 : x > y ? 1 : 0;
      return descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(th.parentNode.cells, function (other) {
      other.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }

  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var head = table.tHead && table.tHead.rows[0];
    if (!head) {
      return;
    }
    Array.prototype.forEach.call(head.cells, function (th, col) {
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortTable(table, th, col); });
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter") {
          sortTable(table, th, col);
        }
      });
    });
  });
  document.documentElement.setAttribute("data-ready", "1");
})();
