"""An example trimtab plugin in a package of its own (see trimtab's docs/plugins.md): `PreferLabel`, a scorer."""

from trimtab_example_plugin.prefer import PreferLabel

__all__ = ["PreferLabel"]
