"""Tests of models/: the data container, the ranker protocol, LambdaRank and the StockTransformer."""
