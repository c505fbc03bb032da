/* The one global the page's Dash bundles need from @babel/polyfill, which the dashboard does not load
   (dashboards/app.py: its core-js shims cost the first view 0.1 to 0.2 s of the page's CPU and every
   browser the dashboard supports has those features).  dash_core_components, dash_table and the
   renderer each call regeneratorRuntime in one place, their lazy loader: a generator without try
   blocks, run by an async-to-generator helper.  This small runtime covers that shape (mark, wrap,
   next / throw / return, abrupt, stop); if the polyfill is on the page, its runtime is kept. */
(function () {
  if (window.regeneratorRuntime) {
    return;
  }
  function wrap(inner, outer, self) {
    var ctx = {
      prev: 0,
      next: 0,
      sent: undefined,
      done: false,
      rval: undefined,
      stop: function () {
        this.done = true;
        return this.rval;
      },
      abrupt: function (type, arg) {
        if (type === "throw") {
          throw arg;
        }
        this.rval = arg;
        this.next = "end";
        this.ended = true; // the caller returns at once: run the "end" case next
      },
    };
    function step(arg) {
      if (ctx.done) {
        return { value: undefined, done: true };
      }
      ctx.sent = arg;
      var value = inner.call(self, ctx);
      while (ctx.ended && !ctx.done) {
        ctx.ended = false;
        value = inner.call(self, ctx);
      }
      return { value: value, done: ctx.done };
    }
    return {
      next: step,
      throw: function (err) {
        ctx.done = true;
        throw err;
      },
      return: function (value) {
        ctx.done = true;
        return { value: value, done: true };
      },
    };
  }
  window.regeneratorRuntime = {
    mark: function (fn) {
      return fn;
    },
    wrap: wrap,
  };
})();
