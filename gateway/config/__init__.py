"""YAML + environment -> frozen, validated dataclasses (`types`), each error naming its key path."""

from gateway.config.load import (
    config_path_from_env,
    embedded_default,
    load_config,
    parse_config,
    with_listen_overrides,
)
from gateway.config.reader import ConfigError

__all__ = ["ConfigError", "config_path_from_env", "embedded_default", "load_config", "parse_config",
           "with_listen_overrides"]
