"""Rankers of the backtest: the protocol (``models.base``), the data container (``models.data``), the
transformer's windows over the wide feature tensor (``models.windows``), LightGBM LambdaRank
(``models.lambdarank``) and the StockTransformer (``models.stock_transformer`` for the network,
``models.transformer_ranker`` for its training behind the protocol).

Only the light shared pieces are imported here; import a model module to use that model (LightGBM and
torch load on first use).
"""

from models.base import Ranker
from models.data import RankingData
from models.windows import feature_tensor, window_view

__all__ = ["Ranker", "RankingData", "feature_tensor", "window_view"]
