"""Which streamed chunks are a reasoning model's thinking and which are its answer.

A reasoning model streams its thinking before the answer, in one of three ways, all told apart
here chunk by chunk (:class:`ReasoningSplit`):

* a separate delta field: ``delta.reasoning_content`` (vLLM's and SGLang's reasoning parsers,
  DeepSeek's API) or ``delta.reasoning`` (OpenRouter, newer vLLM);
* ``<think> ... </think>`` tags inside ``content`` (or a completion's ``text``): a server without a
  reasoning parser streams the model's raw output. A tag split across chunks is found (the last
  seven characters are kept); the opening tag counts only at the start of the output (after
  whitespace);
* only a closing ``</think>`` (chat templates that open the thinking in the prompt, as Qwen3's
  thinking models and DeepSeek-R1's later templates do): the content before it was thinking.
  Applied only to a stream that had no reasoning field and no opening tag.

Each token-bearing chunk gets one flag, ``True`` for thinking: a chunk is thinking unless it
carries answer text (any content outside the tags; a chunk holding both the end of the thinking
and the first answer characters is an answer chunk, since the answer arrived with it)::

    >>> s = ReasoningSplit()
    >>> for content, reasoning in [("", "Let me"), ("", " think"), ("The answer", "")]:
    ...     s.chunk(content, reasoning)
    >>> s.finish(); s.flags, s.first_answer()
    ([True, True, False], 2)
    >>> s = ReasoningSplit()
    >>> for content in ["<thi", "nk>hmm", "</think>", "\\n\\nYes"]:
    ...     s.chunk(content, "")
    >>> s.finish(); s.flags
    [True, True, True, False]
"""

from __future__ import annotations

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"
_KEEP = len(CLOSE_TAG) - 1  # characters kept to find a tag split across chunks

_OPEN, _THINK, _AFTER = 0, 1, 2


class ReasoningSplit:
    """Per-chunk thinking flags of one response; see the module docstring."""

    __slots__ = ("flags", "_state", "_tail", "_lead", "_pending", "_fields")

    def __init__(self) -> None:
        self.flags: list[bool] = []  # per token-bearing chunk: True = thinking
        self._state = _OPEN
        self._tail = ""  # the last characters of content while a tag may still come
        self._lead: str | None = ""  # content so far (leading whitespace dropped) while it may be "<think>"
        self._pending: list[int] = []  # chunks flagged provisionally while the opening is undecided
        self._fields = False  # a reasoning field was seen

    @property
    def any(self) -> bool:
        """Whether the response carried any thinking."""
        return any(self.flags)

    def chunk(self, content: str, reasoning: str) -> None:
        """One token-bearing chunk (``content`` + ``reasoning`` not both empty)."""
        if reasoning:
            self._fields = True
        elif content and self._state == _OPEN and self._lead is None and not self._fields:
            both = self._tail + content  # the usual chunk of a plain answer: _content's last branch, inlined
            if CLOSE_TAG not in both:
                self._tail = both[-_KEEP:]
                self.flags.append(False)
                return
        answer = self._content(content, len(self.flags)) if content else False
        self.flags.append(not answer)

    def plain(self, contents: list[str]) -> None:
        """``chunk(c, "")`` for each of ``contents`` (each non-empty), in order. While no tag has been seen,
        no reasoning field and the opening is decided, the rest are taken at once when the joined text holds no
        closing tag (one that would end in a chunk is found there: ``_tail`` keeps enough before it); else
        one by one (the text is joined at most once per call)."""
        for i, c in enumerate(contents):
            if self._state == _OPEN and self._lead is None and not self._fields:
                rest = contents[i:] if i else contents
                both = self._tail + "".join(rest)
                if CLOSE_TAG not in both:
                    self._tail = both[-_KEEP:]
                    self.flags += [False] * len(rest)
                    return
                for c in rest:
                    self.chunk(c, "")
                return
            self.chunk(c, "")

    def first_answer(self) -> int | None:
        """Index of the first answer chunk (None: no answer arrived)."""
        for i, f in enumerate(self.flags):
            if not f:
                return i
        return None

    def finish(self) -> None:
        """End of the response: an opening left undecided ("<th" and nothing more) was answer text."""
        if self._state == _OPEN and self._lead is not None:
            self._undo_pending()

    # -- tags ------------------------------------------------------------------------------------
    def _undo_pending(self) -> None:
        for i in self._pending:
            self.flags[i] = False
        self._pending = []
        self._lead = None

    def _content(self, text: str, i: int) -> bool:
        """Whether ``text`` (chunk ``i``'s content) carries answer characters."""
        state = self._state
        if state == _AFTER:
            return True
        if state == _OPEN and self._lead is not None:
            lead = (self._lead + text).lstrip()
            if lead.startswith(OPEN_TAG):
                for j in self._pending:  # whitespace or the tag's first characters: thinking
                    self.flags[j] = True
                self._pending = []
                self._lead = None
                self._state = _THINK
                self._tail = ""
                return self._think(lead[len(OPEN_TAG):])
            if OPEN_TAG.startswith(lead):  # still undecided: thinking for now
                self._lead = lead
                self._pending.append(i)
                return False
            self._undo_pending()
        if state == _THINK:
            return self._think(text)
        # no opening tag: answer text, unless a lone closing tag says it was thinking all along
        both = self._tail + text
        p = both.find(CLOSE_TAG) if not self._fields else -1
        if p < 0:
            self._tail = both[-_KEEP:]
            return True
        for j in range(i):
            self.flags[j] = True
        self._state = _AFTER
        return bool(both[p + len(CLOSE_TAG):])

    def _think(self, text: str) -> bool:
        both = self._tail + text
        p = both.find(CLOSE_TAG)
        if p < 0:
            self._tail = both[-_KEEP:]
            return False
        self._state = _AFTER
        self._tail = ""
        return bool(both[p + len(CLOSE_TAG):])
