(function(){
  var rows = Array.prototype.slice.call(document.querySelectorAll('tr.qrow'));
  var texts = rows.map(function(r){ return (r.textContent || '').toLowerCase(); });
  var runs = Array.prototype.slice.call(document.querySelectorAll('select.f-run'));
  var agree = document.getElementById('f-agree'), text = document.getElementById('f-text');
  var shown = document.getElementById('shown');
  function apply(){
    var q = text ? text.value.trim().toLowerCase() : '', a = agree ? agree.value : '', n = 0;
    rows.forEach(function(r, i){
      var ok = runs.every(function(s){
        return !s.value || r.getAttribute('data-' + s.getAttribute('data-run').toLowerCase()) === s.value; });
      if (ok && a) ok = r.getAttribute('data-' + a) === '1';
      if (ok && q) ok = texts[i].indexOf(q) >= 0;
      r.classList.toggle('hidden', !ok); if (ok) n++;
    });
    if (shown) shown.textContent = n + ' of ' + rows.length + ' question(s) shown';
    document.body.setAttribute('data-shown', String(n));
  }
  runs.forEach(function(s){ s.addEventListener('change', apply); });
  if (agree) agree.addEventListener('change', apply);
  if (text) text.addEventListener('input', apply);
  apply();
  document.body.setAttribute('data-ready', '1');
})();
