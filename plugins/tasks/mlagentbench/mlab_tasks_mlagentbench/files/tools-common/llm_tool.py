"""The LLM your tool may call: complete(prompt) -> text, with whatever model this task was set up with.

Configuration (llm_config.json in this folder, written when the task was prepared):
    {"provider": "openai", "model": "gpt-4o-mini", "base_url": "https://api.openai.com/v1",
     "api_key_file": "/path/to/key"}
provider is "openai" (any OpenAI-compatible chat-completions server, local ones included) or "anthropic".

When MLAB_LLM_PROXY_SOCKET names a unix socket (the scorer sets it when it runs your tool on its own inputs),
every call goes to the harness's LLM proxy there instead: same model, no key needed, a budget of calls and
tokens per input; a call beyond the budget raises LLMBudgetExhausted. Only the standard library is used.
"""
import http.client
import json
import os
import socket
import urllib.request
from pathlib import Path

CONFIG_FILE = Path(__file__).resolve().parent / "llm_config.json"
PROXY_SOCKET_ENV = "MLAB_LLM_PROXY_SOCKET"


class LLMNotConfigured(RuntimeError):
    pass


class LLMBudgetExhausted(RuntimeError):
    """The proxy's budget of calls or tokens is spent: no further call will be answered."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def _through_proxy(path, messages, max_tokens, temperature, timeout):
    connection = _UnixConnection(path, timeout)
    try:
        connection.request("POST", "/v1/chat/completions", body=json.dumps(
            {"messages": messages, "max_tokens": max_tokens, "temperature": temperature}),
            headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        reply = json.loads(response.read() or b"{}")
    finally:
        connection.close()
    if response.status == 429:
        raise LLMBudgetExhausted(reply.get("error", {}).get("message", "LLM budget spent"))
    if response.status != 200:
        raise RuntimeError(f"LLM proxy: HTTP {response.status}: {reply.get('error', {}).get('message', '')}")
    return reply["choices"][0]["message"]["content"]


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
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    if os.environ.get(PROXY_SOCKET_ENV):
        return _through_proxy(os.environ[PROXY_SOCKET_ENV], messages, max_tokens, temperature, timeout)
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
    payload = {"model": config["model"], "messages": messages, "max_tokens": max_tokens, "temperature": temperature}
    base = config.get("base_url", "https://api.openai.com/v1").rstrip("/")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    reply = _post(f"{base}/chat/completions", payload, headers, timeout)
    return reply["choices"][0]["message"]["content"]


if __name__ == "__main__":
    print(complete("How many toes do dogs have? Answer in one sentence."))
