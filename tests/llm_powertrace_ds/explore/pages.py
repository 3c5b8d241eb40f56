"""JavaScript that the browser tests evaluate in the explorer's pages."""

# The pages' charts are BokehJS models: every data renderer is tagged [role, key]. These read
# them back from the page's Bokeh document, figure by figure, in the order they were drawn.
RENDERERS = """(role) => {
  const doc = Bokeh.documents[Bokeh.documents.length - 1];
  const plots = [...doc.all_models].filter(m => Array.isArray(m.renderers) && m.x_range);
  return plots.flatMap(p => p.renderers).filter(r => r.data_source && r.tags.length
                                                     && (role === null || r.tags[0] === role));
}"""
# One entry per line drawn: a multi-line (a small panel: one row per device) gives one per row.
TRACE_SUMMARY = f"""() => ({RENDERERS})(null).flatMap(r => {{
  const d = r.data_source;
  const rows = d.get_column('xs') ? Array.from(d.get_column('xs')).map((x, i) => [x, d.get_column('key')[i]])
                                  : [[d.get_column('x') || d.get_column('left') || [], r.tags[1]]];
  return rows.map(([x, key]) => ({{role: r.tags[0], key, name: r.name, n: x.length,
          xs: Array.from(x).filter(v => v !== null && !Number.isNaN(v))}}));
}})"""
XY = f"""(role) => ({RENDERERS})(role).map(r => ({{
  x: Array.from(r.data_source.get_column('x')), y: Array.from(r.data_source.get_column('y'))}}))"""
TIME = "Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('time')"
