"""The HTTP side of `trimtab serve`: the API in route groups, the server, the guards of each request, the JSON
views, Prometheus metrics, the dashboard, and the client the command line uses."""
