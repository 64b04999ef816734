// The site's search reads a leading "-" or "+" as an operator ("leave out pages with", "only pages with"), so an
// option name ("--threads", "-m") fails to parse and finds nothing. Before a query reaches the theme's search
// worker, each leading sign is escaped and so read as text; the index splits option names at their dashes
// (mkdocs.yml, search.separator), so "--threads" finds the pages that name --threads.
function literalSigns(query) {
  return query.replace(/(^|\s)([+-]+)(?=\S)/g, (_, space, signs) => space + signs.replace(/[+-]/g, "\\$&"));
}

if (typeof window !== "undefined" && window.Worker) {
  const NativeWorker = window.Worker;
  window.Worker = function (url, options) {
    const worker = new NativeWorker(url, options);
    const post = worker.postMessage.bind(worker);
    worker.postMessage = (message, ...rest) => {
      const query = message && message.type === 2 && typeof message.data === "string"; // the worker's QUERY
      return post(query ? { ...message, data: literalSigns(message.data) } : message, ...rest);
    };
    return worker;
  };
}

if (typeof module !== "undefined") module.exports = { literalSigns };
