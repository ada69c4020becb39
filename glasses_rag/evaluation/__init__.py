"""The contract of an evaluated benchmark: `Benchmark`, the spec a benchmark package fills (its tasks, tool profile,
data, per-turn scoring, report and how the viewer shows it), and the values that cross it. CRAG-MM
(`glasses_rag.crag_mm.spec`) and SuperGlasses (`glasses_rag.superglasses.spec`) are two such packages; the harness
reads them by name from one registry (`glasses_rag.harness.benchmarks`). See docs/architecture.md."""

from glasses_rag.evaluation.spec import (
    Benchmark,
    DataRequest,
    PreparedData,
    ReportView,
    RunReport,
    RunScorer,
    ScoringOptions,
)

__all__ = ["Benchmark", "DataRequest", "PreparedData", "ReportView", "RunReport", "RunScorer", "ScoringOptions"]
