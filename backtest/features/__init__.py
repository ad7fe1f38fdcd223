"""The feature layer: indicator registry, cross-sectional transforms, feature sets, cache and audit.

Typical use::

    spec = FeatureSetSpec()                                   # the `all` set (conf/features/all.yaml)
    report = audit_features(panel, spec, cutoffs=[...])       # look-ahead check, cheap
    report.raise_if_failed()
    matrix, hit = load_or_build_features(panel, spec, FeatureCache(".cache/features"),
                                         data_fingerprint=panel_fingerprint(panel))
    matrix.values            # float32 (n_rows, n_features), rows = eligible (date, code)
    matrix.cube()            # [date, code, feature] for sequence models
"""

from backtest.features.audit import AuditFinding, AuditReport, audit_features
from backtest.features.build import FeatureCube, FeatureMatrix, build_features, feature_fingerprint
from backtest.features.cache import CacheEntry, FeatureCache, load_or_build_features
from backtest.features.registry import (
    FEATURE_CODE_VERSION,
    FeatureRegistry,
    Indicator,
    default_registry,
    describe_indicators,
)
from backtest.features.sets import FeaturePlan, FeatureSetSpec, plan_features, select_by_gain

__all__ = [
    "FEATURE_CODE_VERSION",
    "AuditFinding",
    "AuditReport",
    "CacheEntry",
    "FeatureCache",
    "FeatureCube",
    "FeatureMatrix",
    "FeaturePlan",
    "FeatureRegistry",
    "FeatureSetSpec",
    "Indicator",
    "audit_features",
    "build_features",
    "default_registry",
    "describe_indicators",
    "feature_fingerprint",
    "load_or_build_features",
    "plan_features",
    "select_by_gain",
]
