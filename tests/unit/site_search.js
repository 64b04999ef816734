// The site's search as a reader's browser runs it: the theme's own search worker over a built site's index, each
// query first through the site's query shim. node site_search.js WORKER SITE QUERY... prints, per query, the
// locations of its results, best first.
const fs = require("fs"), path = require("path"), vm = require("vm");
const [worker, site, ...queries] = process.argv.slice(2);
const { literalSigns } = require(path.join(site, "javascripts", "search-query.js"));
const posted = [];
let handler = null;
const scope = {
  addEventListener: (type, fn) => { if (type === "message") handler = fn },
  postMessage: message => posted.push(message),
  importScripts: () => {},
  location: { href: "http://localhost/" },
  console, setTimeout, clearTimeout, Promise,
};
scope.self = scope;
vm.createContext(scope);
vm.runInContext(fs.readFileSync(worker, "utf8"), scope);
(async () => {
  const index = JSON.parse(fs.readFileSync(path.join(site, "search", "search_index.json"), "utf8"));
  await handler({ data: { type: 0, data: { ...index, options: { suggest: false } } } });  // SETUP
  const found = {};
  for (const query of queries) {
    posted.length = 0;
    await handler({ data: { type: 2, data: literalSigns(query) } });  // QUERY
    const result = posted.find(message => message.type === 3);  // RESULT
    found[query] = result.data.items.map(group => group[0].location);
  }
  console.log(JSON.stringify(found));
})();
