(function(){
  var T0 = performance.now();
  var DATA = JSON.parse(document.getElementById('prov-data').textContent);
  function each(list, f){ Array.prototype.forEach.call(list, f); }
  function el(tag, cls, text){ var e = document.createElement(tag); if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text; return e; }

  // --- the lineage highlight ------------------------------------------------------------
  function reach(g, start){
    var succ = DATA.graphs[g].succ, seen = {}, out = [start], i = 0; seen[start] = 1;
    while (i < out.length){ (succ[out[i++]] || []).forEach(function(m){ if (!seen[m]){ seen[m] = 1; out.push(m); } }); }
    return out;
  }
  function clearHl(sec){ each(sec.querySelectorAll('.hl'), function(e){ e.classList.remove('hl'); });
    var svg = sec.querySelector('svg.lineage'); if (svg) svg.classList.remove('dim'); }
  function highlight(sec, g, start){
    clearHl(sec);
    var set = {}; reach(g, start).forEach(function(n){ set[n] = 1; });
    each(sec.querySelectorAll('[data-node]'), function(e){ if (set[e.getAttribute('data-node')]) e.classList.add('hl'); });
    each(sec.querySelectorAll('svg .le'), function(e){
      if (set[e.getAttribute('data-from')] && set[e.getAttribute('data-to')]) e.classList.add('hl'); });
    var svg = sec.querySelector('svg.lineage'); if (svg) svg.classList.add('dim');
    var info = sec.querySelector('.hlinfo');
    if (info) info.textContent = Object.keys(set).length + ' objects downstream of ' + start + ' (highlighted).';
    return Object.keys(set).length;
  }

  // --- matrix cells ------------------------------------------------------------------------
  function showCell(td){
    var sec = td.closest('section.graph'), g = +sec.getAttribute('data-graph');
    var c = DATA.graphs[g].cells[td.getAttribute('data-cell')], box = sec.querySelector('.cellinfo');
    each(sec.querySelectorAll('td.cell.sel'), function(e){ e.classList.remove('sel'); });
    td.classList.add('sel');
    box.textContent = '';
    box.appendChild(el('div', null, c.field + ' at ' + c.stage + ': ' + c.label));
    [['populated', c.populated, c.n], ['not populated', c.missing, c.total - c.n]].forEach(function(p){
      if (!c.total) return;
      box.appendChild(el('div', null, p[0] + ' (' + p[2] + '):'));
      var ul = el('ul');
      p[1].forEach(function(name){ ul.appendChild(el('li', 'mono', name)); });
      if (p[1].length < p[2]) ul.appendChild(el('li', null, '… ' + (p[2] - p[1].length) + ' more'));
      box.appendChild(ul);
    });
    return c;
  }
  each(document.querySelectorAll('td.cell'), function(td){
    td.addEventListener('click', function(){ showCell(td); });
    td.addEventListener('mouseenter', function(){ showCell(td); });
  });
  each(document.querySelectorAll('[data-src]'), function(e){
    e.addEventListener('click', function(){
      var sec = e.closest('section.graph'); if (sec) highlight(sec, +sec.getAttribute('data-graph'), e.getAttribute('data-src'));
    });
  });

  // --- going to an anchor inside folded sections, or inside a file view not drawn yet ------------
  var SOLO = /[&#]solo\b/.test(location.hash);
  function reveal(id){
    var m = /^(src|code)-(\d+)(?:-(\d+))?$/.exec(id);
    if (m && !document.getElementById(id)) { openFile(m[1], +m[2]); }
    var target = document.getElementById(id);
    if (!target) return null;
    for (var p = target.parentElement; p; p = p.parentElement) if (p.tagName === 'DETAILS') p.open = true;
    if (target.tagName === 'DETAILS') { target.open = true; drawFile(target); }
    if (SOLO) {  // show only the section that holds it, unscrolled (for a screenshot of one view)
      var top = target; while (top.parentElement && top.parentElement !== document.body) top = top.parentElement;
      each(document.body.children, function(c){ if (c !== top && c.tagName !== 'H1') c.style.display = 'none'; });
      var box = target.closest && target.closest('.lines');  // an inner scroll only: the page stays at its top
      var row = (target.closest && target.closest('.ln')) || target;
      if (box) box.scrollTop = Math.max(0, row.getBoundingClientRect().top - box.getBoundingClientRect().top - 80);
    } else if (target.scrollIntoView) target.scrollIntoView({block: 'center'});
    target.classList.add('flash'); setTimeout(function(){ target.classList.remove('flash'); }, 1500);
    return target;
  }
  document.addEventListener('click', function(ev){
    var a = ev.target.closest && ev.target.closest('a[href^="#"]');
    if (!a) return;
    var id = decodeURIComponent(a.getAttribute('href').slice(1));
    if (id === 'selftest') return;
    ev.preventDefault();
    reveal(id);
  });

  // --- the source and code views: drawn when a file is opened ---------------------------------
  var SRC = DATA.sources || [], CODE = DATA.code || [], TITLES = DATA.titles || {}, ORDER = DATA.stage_order || [];
  var host = document.getElementById('fileviews'), panel = null;
  function link(text, anchor){
    if (!anchor) return el('code', null, text);
    var a = el('a'); a.href = '#' + anchor; a.appendChild(el('code', null, text)); return a;
  }
  function joined(box, items){ items.forEach(function(x, i){ if (i) box.appendChild(document.createTextNode(', ')); box.appendChild(x); }); }
  function showPanel(title){
    panel.textContent = ''; panel.hidden = false;
    panel.appendChild(el('div', 'ptitle', title));
    return panel;
  }
  function lineInfo(fi, n){
    var f = SRC[fi], m = f.marks[String(n)], text = f.lines[n - 1];
    var box = showPanel(f.short + ':' + n + (text ? '  ' + text.trim() : ''));
    if (!m) { box.appendChild(el('div', 'muted', 'No object of the trace names this line.')); return box; }
    if (m.note) box.appendChild(el('div', 'muted', m.note));
    m.graphs.forEach(function(gr){
      box.appendChild(el('div', 'pgraph', 'Graph ' + gr.label));
      ORDER.filter(function(st){ return gr.stages[st]; }).forEach(function(st){
        var row = el('div', 'pstage'); row.appendChild(el('span', 'pst', (TITLES[st] || st) + ': '));
        joined(row, gr.stages[st].map(function(o){ return link(o[0], o[1]); }));
        row.setAttribute('data-stage', st); box.appendChild(row);
      });
      if (gr.code && gr.code.length) {
        var row = el('div', 'pstage'); row.appendChild(el('span', 'pst', 'Generated code: '));
        joined(row, gr.code.map(function(c){ return link(c[0], c[1]); })); box.appendChild(row);
      }
      if (gr.lost_at) box.appendChild(el('div', 'muted', 'Lost at ' + (TITLES[gr.lost_at] || gr.lost_at) +
        (gr.lost_by.length ? ' by ' + gr.lost_by.join(', ') : '')));
      var sec = document.querySelector('section.graph[data-graph="' + gr.g + '"]'), btn = el('button', null, 'Highlight its lineage');
      btn.addEventListener('click', function(){ if (sec) { sec.scrollIntoView(); highlight(sec, gr.g, gr.src); } });
      box.appendChild(btn);
    });
    return box;
  }
  function spanInfo(ci, si){
    var sp = CODE[ci].spans[si];
    var box = showPanel(sp.kernel + ' (graph ' + sp.label + ')');
    [['In the report', [[sp.kernel, sp.anchor]]], ['IR ops', sp.ir], ['Post-grad nodes', sp.post]].forEach(function(p){
      var row = el('div', 'pstage'); row.appendChild(el('span', 'pst', p[0] + ': '));
      if (p[1].length) joined(row, p[1].map(function(o){ return link(o[0], o[1]); }));
      else row.appendChild(el('span', 'muted', 'none'));
      box.appendChild(row);
    });
    var row = el('div', 'pstage'); row.setAttribute('data-stage', 'source');
    row.appendChild(el('span', 'pst', 'Source lines: '));
    if (sp.sources.length) joined(row, sp.sources.map(function(s){
      var short = (s[1] || '').split('/').slice(-2).join('/') + ':' + s[2];
      return link(short, s[0] === null ? null : 'src-' + s[0] + '-' + s[2]); }));
    else row.appendChild(el('span', 'muted', 'none: this kernel carries no source'));
    box.appendChild(row);
    return box;
  }
  function fileBody(kind, i){
    var f = kind === 'src' ? SRC[i] : CODE[i], body = el('div', 'fbody');
    if (f.note) body.appendChild(el('div', 'fnote', f.note));
    var marks = kind === 'src' ? f.marks : null, owner = {};
    if (kind === 'code') f.spans.forEach(function(sp, si){ if (sp.start) for (var n = sp.start; n <= (sp.end || sp.start); n++) owner[n] = si;
      sp.calls.forEach(function(n){ owner[n] = si; }); });
    var pre = el('div', 'lines');
    for (var n = 1; n <= f.lines.length; n++) {
      var text = f.lines[n - 1], line = el('div', 'ln'), cls = '';
      line.id = (kind === 'src' ? 'src-' : 'cl-') + i + '-' + n; line.setAttribute('data-n', n);
      if (kind === 'src') { var m = marks[String(n)];
        if (m) cls = m.last ? 'lv-' + m.last : (m.note ? 'lv-noop' : 'lv-never'); }
      else if (owner[n] !== undefined) { cls = 'kspan'; line.setAttribute('data-span', owner[n]);
        if (f.spans[owner[n]].start === n || f.spans[owner[n]].calls.indexOf(n) >= 0) cls += ' khead'; }
      if (cls) line.className = 'ln ' + cls;
      line.appendChild(el('span', 'no', String(n)));
      line.appendChild(el('span', 'tx', text === null ? '' : text));
      if (text === null) line.classList.add('gap');
      pre.appendChild(line);
    }
    if (kind === 'code') f.spans.forEach(function(sp, si){  // an anchor per kernel, on its first line
      var first = sp.start && pre.children[sp.start - 1]; if (first && !first.querySelector('.kanchor')) {
        var a = el('span', 'kanchor'); a.id = 'code-' + i + '-' + si; first.insertBefore(a, first.firstChild); } });
    pre.addEventListener('click', function(ev){
      var line = ev.target.closest('.ln'); if (!line) return;
      each(pre.querySelectorAll('.ln.sel'), function(e){ e.classList.remove('sel'); }); line.classList.add('sel');
      if (kind === 'src') lineInfo(i, +line.getAttribute('data-n'));
      else if (line.hasAttribute('data-span')) spanInfo(i, +line.getAttribute('data-span'));
    });
    body.appendChild(pre);
    return body;
  }
  function drawFile(det){
    if (det.getAttribute('data-drawn')) return;
    det.setAttribute('data-drawn', '1');
    det.appendChild(fileBody(det.getAttribute('data-kind'), +det.getAttribute('data-i')));
  }
  function fileDetails(kind, i, f){
    var det = el('details', 'file'); det.id = kind + '-' + i;
    det.setAttribute('data-kind', kind); det.setAttribute('data-i', i);
    var status = f.status === 'ok' ? '' : ' (' + f.status + ')';
    det.appendChild(el('summary', null, (f.short || f.path) + status));
    det.addEventListener('toggle', function(){ if (det.open) drawFile(det); });
    return det;
  }
  function openFile(kind, i){ var det = document.getElementById(kind + '-' + i); if (det) { det.open = true; drawFile(det); } }
  if (host && (SRC.length || CODE.length)) {
    host.textContent = '';
    panel = el('div', 'panel'); panel.hidden = true; panel.setAttribute('aria-live', 'polite');
    var legend = el('div', 'srclegend');
    ['export_graph', 'dynamo_graph', 'pre_grad', 'aot_graph', 'post_grad', 'ir_pre', 'ir_post', 'kernel_spec', 'artifact'].filter(function(st){
      return st in TITLES; }).forEach(function(st){
      legend.appendChild(el('span', 'lv-' + st, 'last at ' + (TITLES[st] || st))); });
    legend.appendChild(el('span', 'lv-never', 'never attached'));
    legend.appendChild(el('span', 'lv-noop', 'no op / another graph / graph break / none traced'));
    host.appendChild(legend);
    var lib = null;
    SRC.forEach(function(f, i){
      if (!f.user && !lib) { lib = el('details', 'libgroup'); lib.appendChild(el('summary', null, 'Library and framework files')); }
      (f.user ? host : lib).appendChild(fileDetails('src', i, f));
    });
    if (lib) host.appendChild(lib);
    if (CODE.length) { host.appendChild(el('h3', null, 'Generated code, line by line'));
      CODE.forEach(function(f, i){ host.appendChild(fileDetails('code', i, f)); }); }
    host.appendChild(panel);
  }
  var T_READY = performance.now();

  // --- #selftest: what the tests read back ------------------------------------------------------
  function selftest(){
    var res = {graphs: [], injected: !!window.__provtrace_injected, scripts: document.scripts.length};
    each(document.querySelectorAll('section.graph'), function(sec){
      var svg = sec.querySelector('svg.lineage'), grid = sec.querySelector('table.matrix');
      var r = {label: sec.getAttribute('data-label'),
               grid_cells: sec.querySelectorAll('table.matrix td.cell').length,
               grid_colored: 0, grid_height: grid ? grid.getBoundingClientRect().height : 0,
               svg_nodes: svg ? svg.querySelectorAll('.ln').length : 0,
               svg_edges: svg ? svg.querySelectorAll('.le').length : 0,
               svg_width: svg ? svg.getBoundingClientRect().width : 0,
               svg_drawn_nodes: 0,
               headline: (sec.querySelector('p.headline') || {}).textContent || null};
      each(sec.querySelectorAll('table.matrix td.cell'), function(td){
        var bg = getComputedStyle(td).backgroundColor; if (bg && bg !== 'rgba(0, 0, 0, 0)' && bg !== 'transparent') r.grid_colored++; });
      if (svg) each(svg.querySelectorAll('.ln rect'), function(rc){ var b = rc.getBBox(); if (b.width > 0 && b.height > 0) r.svg_drawn_nodes++; });
      var cell = sec.querySelector('td.cell.st-some') || sec.querySelector('td.cell.st-all');
      if (cell) { var c = showCell(cell); r.cell = {field: c.field, stage: c.stage, label: c.label,
        listed: sec.querySelectorAll('.cellinfo li').length, text: sec.querySelector('.cellinfo').textContent}; }
      var rows = sec.querySelectorAll('tr.srcline'), clicked = null;
      for (var i = 0; i < rows.length; i++) { var id = rows[i].getAttribute('data-src');
        if ((DATA.graphs[+sec.getAttribute('data-graph')].succ[id] || []).length) { clicked = rows[i]; break; } }
      if (clicked) {
        clicked.dispatchEvent(new MouseEvent('click', {bubbles: true}));
        r.clicked = clicked.getAttribute('data-src');
        r.highlighted_nodes = svg ? Array.prototype.map.call(svg.querySelectorAll('.ln.hl'), function(e){ return e.getAttribute('data-node'); }) : [];
        r.highlighted_edges = svg ? svg.querySelectorAll('.le.hl').length : 0;
        r.highlighted_rows = sec.querySelectorAll('tr.hl').length;
      }
      res.graphs.push(r);
    });
    // The source view: the files in the order shown; a click on each marked line of the user's files, and
    // on each kernel of the generated code, with what the panel then lists. Each click is timed.
    var clicks = [], opens = [];
    function timed(f){ var t = performance.now(); var out = f(); void document.body.offsetHeight; var ms = performance.now() - t; clicks.push(ms); return ms; }
    res.sources = Array.prototype.map.call(document.querySelectorAll('#fileviews details.file[data-kind="src"]'), function(d){
      var f = SRC[+d.getAttribute('data-i')]; return {path: f.path, user: f.user, status: f.status}; });
    res.lines = [];
    SRC.forEach(function(f, fi){
      if (!f.user) return;
      var t0 = performance.now(); openFile('src', fi); void document.body.offsetHeight; var opened = performance.now() - t0;
      opens.push(opened);
      Object.keys(f.marks).slice(0, 400).forEach(function(n){
        var line = document.getElementById('src-' + fi + '-' + n); if (!line) return;
        var ms = timed(function(){ line.dispatchEvent(new MouseEvent('click', {bubbles: true})); });
        var listed = {};
        each(panel.querySelectorAll('.pstage[data-stage]'), function(row){
          listed[row.getAttribute('data-stage')] = Array.prototype.map.call(row.querySelectorAll('code'), function(c){ return c.textContent; }); });
        var note = panel.querySelector('.ptitle + div.muted');
        res.lines.push({file: f.path, line: +n, cls: line.className, listed: listed, note: note ? note.textContent : null, open_ms: opened, click_ms: ms});
      });
    });
    res.code = [];
    CODE.forEach(function(f, ci){
      var t0 = performance.now(); openFile('code', ci); void document.body.offsetHeight; opens.push(performance.now() - t0);
      f.spans.forEach(function(sp, si){
        var line = document.getElementById('code-' + ci + '-' + si); line = line && line.closest('.ln'); if (!line) return;
        var ms = timed(function(){ line.dispatchEvent(new MouseEvent('click', {bubbles: true})); });
        var row = panel.querySelector('.pstage[data-stage="source"]');
        res.code.push({file: f.path, kernel: sp.kernel, start: sp.start, end: sp.end, click_ms: ms,
                       sources: row ? Array.prototype.map.call(row.querySelectorAll('a'), function(a){ return a.getAttribute('href'); }) : []});
      });
    });
    clicks.sort(function(a, b){ return a - b; });
    res.timing = {script_ms: T_READY - T0, ready_ms: T_READY, clicks: clicks.length,
                  click_median_ms: clicks.length ? clicks[Math.floor(clicks.length / 2)] : null,
                  click_max_ms: clicks.length ? clicks[clicks.length - 1] : null,
                  open_max_ms: opens.length ? Math.max.apply(null, opens) : null};
    var paint = performance.getEntriesByType ? performance.getEntriesByType('paint') : [];
    paint.forEach(function(p){ res.timing[p.name] = p.startTime; });
    var pre = document.getElementById('selftest-result'); pre.textContent = JSON.stringify(res); pre.hidden = false;
    document.body.classList.add('selftest');
  }
  if (location.hash === '#selftest') selftest();
  else if (location.hash.length > 1) {  // a link into the report (#src-0-20, or #go=src-0-20): open what it names
    var target = reveal(decodeURIComponent(location.hash.slice(1)).replace(/^go=/, '').replace(/&solo$/, ''));
    var line = target && (target.classList.contains('ln') ? target : target.closest && target.closest('.ln'));
    if (line) line.dispatchEvent(new MouseEvent('click', {bubbles: true}));
  }
})();
