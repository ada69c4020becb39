(function(){
  var turns = Array.prototype.slice.call(document.querySelectorAll('article.turn'));
  var convs = Array.prototype.slice.call(document.querySelectorAll('section.conv'));
  var texts = turns.map(function(t){ return (t.textContent || '').toLowerCase(); });
  var scoreBoxes = Array.prototype.slice.call(document.querySelectorAll('.f-score'));
  var toolSel = document.getElementById('f-tool'), errBox = document.getElementById('f-error');
  var textBox = document.getElementById('f-text'), shown = document.getElementById('shown');
  function apply(){
    var scores = {}; scoreBoxes.forEach(function(b){ scores[b.value] = b.checked; });
    var tool = toolSel ? toolSel.value : '', q = textBox ? textBox.value.trim().toLowerCase() : '';
    var errOnly = errBox && errBox.checked, n = 0;
    turns.forEach(function(t, i){
      var ok = scores[t.getAttribute('data-score')] !== false;
      if (ok && tool) ok = (t.getAttribute('data-tools') || '').indexOf(' ' + tool + ' ') >= 0;
      if (ok && errOnly) ok = t.getAttribute('data-error') === '1';
      if (ok && q) ok = texts[i].indexOf(q) >= 0;
      t.classList.toggle('hidden', !ok); if (ok) n++;
    });
    convs.forEach(function(c){ c.classList.toggle('hidden', !c.querySelector('article.turn:not(.hidden)')); });
    if (shown) shown.textContent = n + ' of ' + turns.length + ' turn(s) shown';
    document.body.setAttribute('data-shown', String(n));
  }
  function setOpen(root, open){ root.querySelectorAll('details.step').forEach(function(d){ d.open = open; }); }
  scoreBoxes.forEach(function(b){ b.addEventListener('change', apply); });
  if (toolSel) toolSel.addEventListener('change', apply);
  if (errBox) errBox.addEventListener('change', apply);
  if (textBox) textBox.addEventListener('input', apply);
  var ea = document.getElementById('expand-all'), ca = document.getElementById('collapse-all');
  if (ea) ea.addEventListener('click', function(){ setOpen(document, true); });
  if (ca) ca.addEventListener('click', function(){ setOpen(document, false); });
  document.querySelectorAll('button.tog').forEach(function(b){
    b.addEventListener('click', function(){ setOpen(b.closest('article.turn'), b.getAttribute('data-open') === '1'); });
  });
  apply();
  document.body.setAttribute('data-ready', '1');
})();
