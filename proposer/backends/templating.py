"""Prompt text → token ids, shared by the local backends (hf, vllm) so both see exactly the same tokens.

Instruct models get their chat template, with ``<answer_1>`` pre-filled as the start of the assistant turn
(the prompt ends with it); the tiny model gets the plain prompt. Over-long prompts lose their *start*: the
end holds the instructions and the answer opening.
"""
from __future__ import annotations

ANSWER_PREFILL = "<answer_1>"
PREFILLS = (ANSWER_PREFILL, "<reasoning>")  # a prompt ending in one of these continues it in the assistant turn


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def resolve_chat(chat: bool | str, tokenizer, who: str) -> bool:
    """The ``chat: auto | true | false`` setting as a bool: auto = the tokenizer has a chat template; true
    without a template is a one-line error (the prompt would silently go out plain)."""
    from proposer.errors import BackendError

    if chat == "auto" or chat is None:
        return has_chat_template(tokenizer)
    if isinstance(chat, str):
        if chat.lower() not in ("true", "false"):
            raise BackendError(f"{who}: chat must be auto, true or false, got {chat!r}")
        chat = chat.lower() == "true"
    if chat and not has_chat_template(tokenizer):
        raise BackendError(f"{who}: chat=true but the tokenizer has no chat template")
    return bool(chat)


def render_chat(tokenizer, prompt: str) -> str | None:
    """The chat-templated text, or None when the tokenizer has no chat template."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    prefill = next((p for p in PREFILLS if prompt.endswith(p)), "")
    user = prompt[: len(prompt) - len(prefill)].rstrip("\n") if prefill else prompt
    msgs = [{"role": "user", "content": user}]
    if prefill:
        msgs.append({"role": "assistant", "content": prefill})
        return tokenizer.apply_chat_template(msgs, tokenize=False, continue_final_message=True)
    return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def encode_prompt(tokenizer, prompt: str, *, chat: bool, max_context: int, max_tokens: int) -> tuple[list[int], int]:
    """(prompt token ids, number of tokens dropped from the left so prompt + max_tokens fit the context;
    at most half the context is reserved for the completion)."""
    templated = render_chat(tokenizer, prompt) if chat else None
    text = prompt if templated is None else templated
    ids = list(tokenizer(text, add_special_tokens=templated is None)["input_ids"])
    keep = max(1, max_context - min(max(int(max_tokens), 1), max_context // 2))
    if len(ids) > keep:
        return ids[len(ids) - keep:], len(ids) - keep
    return ids, 0
