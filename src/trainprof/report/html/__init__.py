"""The self-contained HTML report and the notebook views: plain-data views, SVG charts."""
