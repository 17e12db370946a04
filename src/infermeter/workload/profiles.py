"""Workload profiles: named, documented parameter sets, overridable field by field.

One frozen pydantic model per profile; the models' defaults *are* the profile
definitions, and :data:`PROFILES` maps each name to its model::

    params = profile_params("classification", {"questions_per_document": 8})
    params.document_tokens.label()       # '10000,5000,8000,12000'
    profile_table()                      # rows for `infermeter profiles`

Length fields take the ``mean[,stdev[,min,max]]`` syntax of ``--input-tokens``
(a clamped, rounded normal; see :mod:`infermeter.workload.lengths`).
Defaults follow HF inference-benchmarker's profiles where it has one
(``fixed-length``, ``chat``, ``classification``, ``code-generation``); the
fields it does not pin (turns, questions per document) are infermeter's
choices and say so in their descriptions. ``reasoning`` follows SemiAnalysis
InferenceX's "reasoning" shape (1k tokens in, 8k out): a reasoning model's
``max_tokens`` bounds its thinking and its answer together.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, ValidationError

from infermeter.errors import ConfigError
from infermeter.workload.lengths import LengthDist


def _parse_len(value: Any) -> LengthDist:
    if isinstance(value, dict):
        return LengthDist(int(value["mean"]), float(value.get("stdev", 0)), int(value.get("min", 0)), int(value.get("max", 0)))
    return LengthDist.parse(value, flag="length")


Length = Annotated[LengthDist, BeforeValidator(_parse_len), PlainSerializer(lambda d: d.label(), return_type=str)]
Source = Literal["prose", "docs", "code"]


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class FixedParams(_Params):
    """Fixed-length prompts (HF inference-benchmarker fixed-length): 200 tokens in, up to 800 out."""

    kind: Literal["fixed"] = "fixed"
    input_tokens: Length = Field(LengthDist.parse("200"), description="prompt tokens")
    output_tokens: Length = Field(LengthDist.parse("800,100,50,800"), description="max_tokens per request")
    source: Source = Field("prose", description="text source for prompts")


class SyntheticParams(_Params):
    """Lengths from --input-tokens/--output-tokens; optional shared prefixes (--prefix-tokens, --prefix-groups)."""

    kind: Literal["synthetic"] = "synthetic"
    input_tokens: Length = Field(LengthDist.parse("200"), description="prompt tokens, shared prefix included")
    output_tokens: Length = Field(LengthDist.parse("100"), description="max_tokens per request")
    prefix_tokens: int = Field(0, ge=0, description="tokens of shared prefix at the start of every prompt")
    prefix_groups: int = Field(1, ge=1, description="distinct shared prefixes; each request picks one uniformly")
    source: Source = Field("prose", description="text source for prompts")


class ChatParams(_Params):
    """Multi-turn conversations; each turn resends the whole history (user and assistant turns)."""

    kind: Literal["chat"] = "chat"
    turns: Length = Field(LengthDist.parse("5,3,1,12"), description="user turns per conversation (infermeter's choice)")
    user_tokens: Length = Field(
        LengthDist.parse("120,80,10,600"), description="tokens per user message (infermeter's choice)"
    )
    output_tokens: Length = Field(LengthDist.parse("800,100,50,800"), description="max_tokens per turn (HF chat)")
    reply_tokens: Length | None = Field(
        None, description="assistant reply length kept in the history; none = the turn's max_tokens"
    )
    system_tokens: int = Field(0, ge=0, description="tokens of a system prompt shared by every conversation")
    max_context_tokens: int = Field(16384, ge=16, description="a conversation ends before its input would pass this")
    active_conversations: int = Field(16, ge=1, description="conversations interleaved in the request stream")
    source: Source = Field("prose", description="text source for messages")


class ClassificationParams(_Params):
    """Long documents, each asked several short questions: the document is a shared prefix."""

    kind: Literal["classification"] = "classification"
    document_tokens: Length = Field(
        LengthDist.parse("10000,5000,8000,12000"), description="document tokens (HF classification)"
    )
    question_tokens: Length = Field(LengthDist.parse("30,8,16,60"), description="question tokens after the document")
    questions_per_document: int = Field(
        20, ge=1, description="questions asked about each document (infermeter's choice)"
    )
    active_documents: int = Field(4, ge=1, description="documents whose questions are interleaved")
    output_tokens: Length = Field(LengthDist.parse("50,10,30,80"), description="max_tokens per request (HF)")
    source: Source = Field("prose", description="text source for documents")


class CodeParams(_Params):
    """Code contexts from Python's standard library, then a short instruction; little reuse."""

    kind: Literal["code"] = "code"
    input_tokens: Length = Field(
        LengthDist.parse("4096,1000,3000,6000"), description="prompt tokens (HF code-generation)"
    )
    output_tokens: Length = Field(LengthDist.parse("50,10,30,80"), description="max_tokens per request (HF)")
    source: Source = Field("code", description="text source for contexts")


class ReasoningParams(_Params):
    """A reasoning model's traffic: a question, then thousands of tokens out (thinking, then the answer)."""

    kind: Literal["reasoning"] = "reasoning"
    input_tokens: Length = Field(
        LengthDist.parse("1024,256,256,2048"), description="prompt tokens: a question (InferenceX's 1k-in reasoning shape)"
    )
    output_tokens: Length = Field(
        LengthDist.parse("8192,2048,2048,16384"),
        description="max_tokens per request, thinking included (InferenceX's 8k-out reasoning shape)",
    )
    source: Source = Field("prose", description="text source for questions")


PROFILES: dict[str, type[_Params]] = {
    "chat": ChatParams,
    "classification": ClassificationParams,
    "code": CodeParams,
    "fixed": FixedParams,
    "reasoning": ReasoningParams,
    "synthetic": SyntheticParams,
}

# Which profile field the generic flags set, per profile.
FLAG_FIELDS: dict[str, dict[str, str]] = {
    "chat": {"input_tokens": "user_tokens", "output_tokens": "output_tokens"},
    "classification": {"input_tokens": "document_tokens", "output_tokens": "output_tokens"},
    "code": {"input_tokens": "input_tokens", "output_tokens": "output_tokens"},
    "fixed": {"input_tokens": "input_tokens", "output_tokens": "output_tokens"},
    "reasoning": {"input_tokens": "input_tokens", "output_tokens": "output_tokens"},
    "synthetic": {
        "input_tokens": "input_tokens",
        "output_tokens": "output_tokens",
        "prefix_tokens": "prefix_tokens",
        "prefix_groups": "prefix_groups",
    },
}

_FLAG_NAMES = {
    "input_tokens": "--input-tokens",
    "output_tokens": "--output-tokens",
    "prefix_tokens": "--prefix-tokens",
    "prefix_groups": "--prefix-groups",
}


def profile_params(name: str, overrides: dict[str, Any] | None = None, flags: dict[str, Any] | None = None) -> Any:
    """Validated parameters of profile ``name`` with ``flags`` then ``overrides`` applied.

    ``flags`` holds the generic flags (input_tokens, output_tokens, prefix_tokens,
    prefix_groups) that are not None; each maps to the profile's own field.
    """
    model = PROFILES.get(name)
    if model is None:
        raise ConfigError(f"--profile {name}: unknown profile; choose one of {', '.join(sorted(PROFILES))}")
    values: dict[str, Any] = {}
    for flag, value in (flags or {}).items():
        if value is None:
            continue
        field = FLAG_FIELDS[name].get(flag)
        if field is None:
            raise ConfigError(f"{_FLAG_NAMES.get(flag, flag)} does not apply to profile {name!r}")
        if field.endswith("_tokens") and isinstance(value, str | int) and field in _length_fields(model):
            value = LengthDist.parse(value, flag=_FLAG_NAMES.get(flag, flag))
        values[field] = value
    fields = set(model.model_fields) - {"kind"}
    for key, value in (overrides or {}).items():
        if key not in fields:
            raise ConfigError(
                f"override {key!r}: not a field of profile {name!r}; fields: {', '.join(sorted(fields))}"
            )
        if key in _length_fields(model) and isinstance(value, str | int):
            value = LengthDist.parse(value, flag=f"override {key}")
        values[key] = value
    try:
        return model(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"profile {name!r}: {problems}") from None


def _length_fields(model: type[_Params]) -> set[str]:
    return {k for k, f in model.model_fields.items() if "LengthDist" in repr(f.annotation)}


def profile_table() -> list[dict[str, Any]]:
    """One row per profile: name, summary and each field with its default and description."""
    rows = []
    for name, model in PROFILES.items():
        defaults = model().model_dump(mode="json")
        fields = [
            {"field": k, "default": defaults[k], "description": f.description or ""}
            for k, f in model.model_fields.items()
            if k != "kind"
        ]
        rows.append({"profile": name, "summary": (model.__doc__ or "").strip(), "fields": fields})
    return rows
