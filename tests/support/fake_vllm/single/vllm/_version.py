__version__ = version = "0.10.1.fake"
