"""The Prometheus exporter: the state stores of any number of host sessions as `/metrics`.

``collector`` turns stores into metric families at scrape time (nothing runs between scrapes);
``server`` serves them over HTTP; ``hosts`` keeps one session per host connected.
"""
