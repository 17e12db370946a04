"""The ``classification`` profile: long documents, each asked several short questions.

Every question about a document is sent as *document + question*, so all but
the first request per document can reuse the document from a prefix cache::

    wl = ClassificationWorkload(ClassificationParams(questions_per_document=4), ctx, seed=0)
    spec.prefix_group            # the document's number
    spec.input_tokens            # document tokens + question tokens, exact

The ideal prefix-cache hit fraction is ``(Q-1)/Q * D/(D+q)`` for Q questions
per document of D tokens and questions of q tokens: ~0.95 with the defaults
(Q=20, D~10k, q~30). ``active_documents`` documents are open at once and the
stream picks one at random per request.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from infermeter.workload.compose import TextMaker
from infermeter.workload.context import BuildContext
from infermeter.workload.lengths import LengthSampler
from infermeter.workload.profiles import ClassificationParams
from infermeter.workload.spec import RequestSpec

QUESTION_HEADS = (
    " Question: which topic label fits the text above best? Options:",
    " Question: what is the tone of the text above? Options:",
    " Question: is the text above mostly about people, places or events? Hint:",
    " Question: which sentence of the text above matters most? Hint:",
)


@dataclass(slots=True)
class _Document:
    doc_id: int
    text: str
    tokens: int
    asked: int = 0


class ClassificationWorkload:
    """Documents shared by ``questions_per_document`` requests each."""

    def __init__(self, params: ClassificationParams, ctx: BuildContext, *, seed: int) -> None:
        self.params = params
        self.ctx = ctx
        self.seed = seed
        self.pool = ctx.pool(params.source, params.document_tokens.max + params.question_tokens.max)
        self._heads = [(h, self.pool.mid_count(h)) for h in QUESTION_HEADS]

    def describe(self) -> dict[str, Any]:
        return self.ctx.describe(
            profile="classification",
            parameters=self.params.model_dump(mode="json"),
            sources=[self.pool.describe()],
            seed=self.seed,
            shares_prefixes=True,  # by design: conversation history / documents are sent again
        )

    def requests(self) -> Iterator[RequestSpec]:
        p, ctx, pool = self.params, self.ctx, self.pool
        maker = TextMaker(pool, ctx.text_rng(self.seed))
        docs = LengthSampler(p.document_tokens, np.random.default_rng([self.seed, 1]))
        questions = LengthSampler(p.question_tokens, np.random.default_rng([self.seed, 5]))
        outs = LengthSampler(p.output_tokens, np.random.default_rng([self.seed, 3]))
        pick = np.random.default_rng([self.seed, 4])
        heads = self._heads

        def new(doc_id: int) -> _Document:
            text, got = pool.exact(lambda m: maker.first(doc_id, m), docs.draw())
            return _Document(doc_id, text, got)

        def question(i: int, n: int) -> str:
            head, hn = heads[i % len(heads)]
            if n <= hn:
                return maker.mid(i, n)
            return head + maker.mid(i, n - hn)

        active = [new(d) for d in range(p.active_documents)]
        next_doc = p.active_documents
        index = 0
        while True:
            slot = int(pick.integers(len(active)))
            doc = active[slot]
            q_n = questions.draw()
            if pool.additive:
                text, got = doc.text + question(index, q_n), doc.tokens + q_n
            else:
                text, got = pool.exact(lambda m: doc.text + question(index, m - doc.tokens), doc.tokens + q_n)
            yield ctx.spec(index, text, outs.draw(), got, prefix_group=doc.doc_id)
            index += 1
            doc.asked += 1
            if doc.asked >= p.questions_per_document:
                active[slot] = new(next_doc)
                next_doc += 1
