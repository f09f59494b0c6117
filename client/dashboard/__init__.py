"""tidemq's web console (`tidemq-dashboard`): the pages of RocketMQ Dashboard that operators
use, served by aiohttp from the admin API (client/admin/api.py).

cli.py starts it, server.py routes the JSON API and the static front end (static/: plain HTML,
CSS and JavaScript, charts drawn as SVG by static/chart.js; nothing is fetched at run time),
views.py gathers what each page shows, sampler.py keeps the live charts' figures.
"""

from tidemq.client.dashboard.cli import main

__all__ = ["main"]
