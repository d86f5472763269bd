"""The wire types of sbx/types.py against the one contract, api/openapi.yaml.

Every dataclass of ``sbx.types`` is a wire type: it names its component
schema (``_wire``) and must have exactly the schema's properties (by their
JSON names) and declare exactly its required ones. A field added to the
API (in Go and the schema) but not here, or here but not in the schema,
fails. The schema is read with PyYAML (Debian's python3-yaml); without it
the test skips, unless CI=true.
"""

from __future__ import annotations

import dataclasses
import os
import unittest
from typing import Any, Dict, Set

import sbx.types as T

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(HERE, "..", "..", "..", "api", "openapi.yaml")
CI = os.environ.get("CI", "").lower() == "true"


def load_schemas() -> Dict[str, Any]:
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        if CI:
            raise AssertionError("PyYAML is not installed (scripts/install.sh --test-deps installs python3-yaml)")
        raise unittest.SkipTest("PyYAML is not installed")
    with open(SPEC) as f:
        return yaml.safe_load(f)["components"]["schemas"]


def json_fields(cls: type) -> Set[str]:
    """The JSON members a dataclass reads: field names, or their ``json`` metadata (None: not from JSON)."""
    out = set()
    for f in dataclasses.fields(cls):
        key = f.metadata.get("json", f.name)
        if f.name != "raw" and key is not None:
            out.add(key)
    return out


class TypesMatchSchema(unittest.TestCase):
    def test_every_wire_type_matches_its_schema(self) -> None:
        schemas = load_schemas()
        checked = 0
        for name in T.__all__:
            cls = getattr(T, name)
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
                continue
            with self.subTest(type=name):
                schema, required = T.wire_schema(cls)
                self.assertTrue(schema, f"{name} names no component schema (@_wire)")
                self.assertIn(schema, schemas, f"{name}: no schema {schema!r} in api/openapi.yaml")
                sc = schemas[schema]
                props = set((sc.get("properties") or {}).keys())
                fields = json_fields(cls)
                self.assertEqual(sorted(fields - props), [], f"{name}: fields not in schema {schema}")
                self.assertEqual(sorted(props - fields), [], f"{name}: schema {schema}'s properties missing here")
                self.assertEqual(sorted(required), sorted(sc.get("required") or []),
                                 f"{name}: required fields differ from schema {schema}'s")
                checked += 1
        self.assertGreaterEqual(checked, 28)

    def test_a_field_added_on_one_side_fails(self) -> None:
        # The check itself: a schema with one more property than the type.
        schemas = load_schemas()
        props = set(schemas["NetworkRules"]["properties"]) | {"bandwidth"}
        self.assertNotEqual(json_fields(T.NetworkRules), props)


if __name__ == "__main__":
    unittest.main()
