"""The LLM your tool may call: complete(prompt) -> text, with whatever model this task was set up with.

Configuration (llm_config.json in this folder, written when the task was prepared):
    {"provider": "openai", "model": "gpt-4o-mini", "base_url": "https://api.openai.com/v1",
     "api_key_file": "/path/to/key"}
provider is "openai" (any OpenAI-compatible chat-completions server, local ones included) or "anthropic".
Only the standard library is used.
"""
import json
import os
import urllib.request
from pathlib import Path

CONFIG_FILE = Path(__file__).resolve().parent / "llm_config.json"


class LLMNotConfigured(RuntimeError):
    pass


def _config():
    if not CONFIG_FILE.exists():
        raise LLMNotConfigured("no LLM is configured for this task (llm_config.json is missing)")
    config = json.loads(CONFIG_FILE.read_text())
    if not config.get("provider"):
        raise LLMNotConfigured("no LLM is configured for this task (llm_config.json has no provider)")
    return config


def _api_key(config):
    if config.get("api_key_file"):
        return Path(config["api_key_file"]).expanduser().read_text().strip()
    return os.environ.get(config.get("api_key_env", ""), "")


def _post(url, payload, headers, timeout):
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def complete(prompt, max_tokens=1024, system=None, temperature=0.0, timeout=120):
    """Send one prompt to the configured model and return its reply as text."""
    config = _config()
    key = _api_key(config)
    if config["provider"] == "anthropic":
        payload = {"model": config["model"], "max_tokens": max_tokens, "temperature": temperature,
                   "messages": [{"role": "user", "content": prompt}]}
        if system:
            payload["system"] = system
        base = config.get("base_url", "https://api.anthropic.com/v1").rstrip("/")
        reply = _post(f"{base}/messages", payload, {"x-api-key": key, "anthropic-version": "2023-06-01"}, timeout)
        return "".join(block.get("text", "") for block in reply.get("content", []))
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    payload = {"model": config["model"], "messages": messages, "max_tokens": max_tokens, "temperature": temperature}
    base = config.get("base_url", "https://api.openai.com/v1").rstrip("/")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    reply = _post(f"{base}/chat/completions", payload, headers, timeout)
    return reply["choices"][0]["message"]["content"]


if __name__ == "__main__":
    print(complete("How many toes do dogs have? Answer in one sentence."))
