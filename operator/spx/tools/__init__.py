"""Build tools of the repository (run by developers and CI, never by the operator or the bench pod).

``spx.tools.dashboard`` generates the chart's Grafana dashboard. The runtime layers (``spx.api``,
``spx.analysis``, ``spx.bench``, ``spx.runner``, ``spx.controller``, ``spx.cli``) never import this
package (an import-linter contract in ``pyproject.toml``), so its dev-only dependencies
(grafana-foundation-sdk) stay out of the images.
"""
