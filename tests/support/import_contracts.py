"""An import-linter contract type the built-in ones cannot express: modules picked by the start of
their own name (`test_*`) are imported by nothing. Registered in pyproject.toml's
[tool.importlinter] `contract_types`."""

from __future__ import annotations

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output
from importlinter.domain.helpers import module_expressions_to_modules


class UnimportedModulesContract(Contract):
    """Modules inside `containers` whose name starts with `name_prefix` are imported by no module."""

    containers = fields.SetField(subfield=fields.ModuleExpressionField())
    name_prefix = fields.StringField()

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        prefix = str(self.name_prefix)
        modules = module_expressions_to_modules(graph, self.containers, as_packages=True)  # type: ignore[arg-type]
        imports = sorted(
            (importer, module.name)
            for module in modules
            if module.name.rsplit(".", 1)[-1].startswith(prefix)
            for importer in graph.find_modules_that_directly_import(module.name)
        )
        return ContractCheck(kept=not imports, metadata={"imports": imports})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported in check.metadata["imports"]:
            output.print_error(f"{importer} imports {imported}")
