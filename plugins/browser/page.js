/* termd-browser page script (evaluated in the page before each observation): gives every element a
   stable `bid` attribute (kept across observations, new elements numbered on), finds the focused
   element's bid, and turns the visible page into readable text (markdown-like). Returns
   {url, title, text, focused, ready}. */
(function () {
  var W = window, D = document;
  var docs = [], els = [];
  function collectDocs(doc) {
    docs.push(doc);
    var fr = doc.querySelectorAll('iframe,frame');
    for (var i = 0; i < fr.length; i++) {
      try { var cd = fr[i].contentDocument; if (cd && cd.documentElement) collectDocs(cd); } catch (e) { }
    }
  }
  function collectEls(root) {
    var all = root.querySelectorAll('*');
    for (var i = 0; i < all.length; i++) {
      els.push(all[i]);
      if (all[i].shadowRoot) collectEls(all[i].shadowRoot);
    }
  }
  collectDocs(D);
  docs.forEach(collectEls);
  var seen = new Set(), fresh = [], ok = /^[a-zA-Z0-9]+$/;
  for (var i = 0; i < els.length; i++) {
    var b = els[i].getAttribute('bid');
    if (b !== null && ok.test(b) && !seen.has(b)) seen.add(b); else fresh.push(els[i]);
  }
  if (typeof W.__termdNextBid !== 'number') W.__termdNextBid = 0;
  for (var j = 0; j < fresh.length; j++) {
    var id;
    do { id = String(W.__termdNextBid++); } while (seen.has(id));
    seen.add(id);
    fresh[j].setAttribute('bid', id);
  }

  var a = D.activeElement;
  for (;;) {
    if (!a) break;
    if (a.shadowRoot && a.shadowRoot.activeElement) { a = a.shadowRoot.activeElement; continue; }
    if (a.tagName === 'IFRAME' || a.tagName === 'FRAME') {
      var inner = null;
      try { inner = a.contentDocument && a.contentDocument.activeElement; } catch (e) { }
      if (inner) { a = inner; continue; }
    }
    break;
  }
  var focused = (a && a.getAttribute) ? (a.getAttribute('bid') || '') : '';

  /* ---- page to text ---- */
  var NL = '\u0001', SP = '\u0002';          /* newline and space that survive the final clean-up */
  var SKIP = { SCRIPT: 1, STYLE: 1, NOSCRIPT: 1, TEMPLATE: 1, SVG: 1, CANVAS: 1, HEAD: 1, META: 1,
               LINK: 1, TITLE: 1, OBJECT: 1, EMBED: 1, AUDIO: 1, VIDEO: 1, MAP: 1, DATALIST: 1 };
  var cache = new Map();
  function style(el) {
    var s = cache.get(el);
    if (s === undefined) {
      try { s = el.ownerDocument.defaultView.getComputedStyle(el); } catch (e) { s = null; }
      cache.set(el, s);
    }
    return s;
  }
  function oneLine(s) { return s.replace(/[\s\u0001\u0002]+/g, ' ').trim(); }
  function attr(k, v) { return v ? ' ' + k + '=' + JSON.stringify(v) : ''; }
  function kids(n, ctx) {
    var list = n.shadowRoot ? n.shadowRoot.childNodes : n.childNodes, s = '';
    for (var i = 0; i < list.length; i++) s += conv(list[i], ctx);
    return s;
  }
  function conv(n, ctx) {
    if (n.nodeType === 3) {
      var p = n.parentElement, ps = p ? style(p) : null;
      if (ps && ps.visibility !== 'visible') return '';
      if (ctx.pre) return n.data.replace(/\n/g, NL).replace(/[ \t]/g, SP);
      return n.data.replace(/\s+/g, ' ');
    }
    if (n.nodeType !== 1) return '';
    var tag = String(n.tagName).toUpperCase();
    if (SKIP[tag]) return '';
    if (tag === 'SLOT') {
      var an = n.assignedNodes({ flatten: true });
      if (!an.length) return kids(n, ctx);
      var t = '';
      for (var i = 0; i < an.length; i++) t += conv(an[i], ctx);
      return t;
    }
    var st = style(n);
    if (!st || st.display === 'none') return '';
    if (st.display === 'contents') return kids(n, ctx);
    if (n.checkVisibility && !n.checkVisibility()) return '';
    var block = /^(block|flex|grid|list-item|table|flow-root)/.test(st.display) && st.display.indexOf('table-') !== 0;
    var inner;
    switch (tag) {
    case 'H1': case 'H2': case 'H3': case 'H4': case 'H5': case 'H6':
      inner = oneLine(kids(n, ctx));
      return inner ? '\n\n' + '#'.repeat(+tag[1]) + ' ' + inner + '\n\n' : '';
    case 'A':
      inner = oneLine(kids(n, ctx));
      if (!n.hasAttribute('href')) return inner;
      var label = inner || n.getAttribute('aria-label') || n.title || '';
      var href = n.href;
      var link = label ? '[' + label + '](' + href + ')' : '[' + href + '](' + href + ')';
      return block ? '\n' + link + '\n' : link;
    case 'IMG':
      return n.alt ? ' ' + n.alt + ' ' : '';
    case 'BR': return '\n';
    case 'HR': return '\n\n---\n\n';
    case 'PRE':
      inner = kids(n, { pre: true, list: ctx.list });
      return '\n\n```' + NL + inner.replace(/^\u0001+|\u0001+$/g, '') + NL + '```\n\n';
    case 'CODE': case 'KBD': case 'SAMP':
      if (ctx.pre) return kids(n, ctx);
      inner = kids(n, ctx).trim();
      return inner ? '`' + inner + '`' : '';
    case 'B': case 'STRONG':
      inner = kids(n, ctx);
      return inner.trim() ? '**' + inner.trim() + '**' : inner;
    case 'I': case 'EM':
      inner = kids(n, ctx);
      return inner.trim() ? '_' + inner.trim() + '_' : inner;
    case 'UL': case 'OL': case 'MENU':
      inner = kids(n, { pre: ctx.pre, list: (ctx.list || 0) + 1, ordered: tag === 'OL', count: 0 });
      return '\n\n' + inner + '\n\n';
    case 'LI':
      var depth = ctx.list || 1;
      var mark = ctx.ordered ? (++ctx.count) + '. ' : '* ';
      inner = kids(n, { pre: ctx.pre, list: depth }).replace(/^\s+|\s+$/g, '').replace(/\n{2,}/g, '\n');
      return '\n' + SP.repeat(2 * (depth - 1)) + mark + inner;
    case 'TABLE':
      var rows = [], head = false;
      for (var r = 0; r < n.rows.length; r++) {
        var row = n.rows[r], rs = style(row);
        if (rs && rs.display === 'none') continue;
        var cells = [];
        for (var c = 0; c < row.cells.length; c++) {
          var cell = row.cells[c], cs = style(cell);
          if (cs && cs.display === 'none') continue;
          if (cell.tagName === 'TH' && rows.length === 0) head = true;
          cells.push(oneLine(kids(cell, { pre: false, list: 0 })));
        }
        if (cells.length) rows.push(cells.join(' | '));
        if (head && rows.length === 1) { rows.push(cells.map(function () { return '---'; }).join(' | ')); }
      }
      if (n.caption) rows.unshift(oneLine(kids(n.caption, ctx)));
      return '\n\n' + rows.join('\n') + '\n\n';
    case 'CAPTION': return '';
    case 'INPUT':
      var ty = (n.type || 'text').toLowerCase();
      if (ty === 'hidden') return '';
      if (ty === 'checkbox' || ty === 'radio')
        return (n.checked ? '[x]' : '[ ]') + ' ';
      if (ty === 'button' || ty === 'submit' || ty === 'reset' || ty === 'image')
        return '[button ' + (n.value || n.alt || ty) + ']';
      return '[input type=' + ty + attr('name', n.name) + attr('value', n.value) +
             (n.value ? '' : attr('placeholder', n.placeholder)) + ']';
    case 'TEXTAREA':
      return '[textarea' + attr('name', n.name) + attr('value', n.value) +
             (n.value ? '' : attr('placeholder', n.placeholder)) + ']';
    case 'SELECT':
      var sel = [], opts = [];
      for (var o = 0; o < n.options.length; o++) {
        var txt = oneLine(n.options[o].text);
        opts.push(txt);
        if (n.options[o].selected) sel.push(txt);
      }
      return '[select' + attr('name', n.name) + attr('selected', sel.join(', ')) + ' options=' + JSON.stringify(opts.join(', ')) + ']';
    case 'BUTTON':
      return '[button ' + oneLine(kids(n, ctx)) + ']';
    case 'IFRAME': case 'FRAME':
      var body = null;
      try { body = n.contentDocument && n.contentDocument.body; } catch (e) { }
      return body ? '\n\n' + kids(body, { pre: false, list: 0 }) + '\n\n' : '';
    case 'BLOCKQUOTE':
      inner = kids(n, ctx).trim();
      return '\n\n' + inner.split('\n').map(function (l) { return '> ' + l; }).join('\n') + '\n\n';
    case 'P': case 'DL': case 'FIGURE': case 'DETAILS': case 'FIELDSET':
      return '\n\n' + kids(n, ctx) + '\n\n';
    case 'TD': case 'TH':
      return ' ' + kids(n, ctx) + ' ';
    }
    inner = kids(n, ctx);
    return block ? '\n' + inner + '\n' : inner;
  }
  var root = D.body || D.documentElement;
  var text = root ? conv(root, { pre: false, list: 0 }) : '';
  text = text.replace(/[ \t]+/g, ' ').replace(/ *\n */g, '\n').replace(/\n{3,}/g, '\n\n').trim()
             .replace(/\u0001/g, '\n').replace(/\u0002/g, ' ');
  return { url: location.href, title: D.title, text: text, focused: focused, ready: D.readyState };
})()
