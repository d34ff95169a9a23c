"""``fluss-spark acl``: add, list and remove ACLs (who may do what on which resource)."""

from __future__ import annotations

from fluss_spark.cli.common import _json, connect
from fluss_spark.cli.output import emit_json, print_table
from fluss_spark.errors import ConfigError
from fluss_spark.protocol.acl import (PRINCIPAL_SYNTAX, RESOURCE_SYNTAX, AclBinding, AclFilter,
                                      parse_host, parse_operation,
                                      parse_principal, parse_resource)

_COLUMNS = ["principal", "permission", "operation", "resource", "host"]


def add_commands(sub, cmd) -> None:
    """Register `acl add|list|remove`."""
    acl = sub.add_parser("acl", help="ACLs: who may do what on the cluster, databases, tables")
    asub = acl.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = cmd(asub, "add", "allow a principal an operation on a resource", cmd_acl_add)
    _options(c, required=True)
    _options(cmd(asub, "list", "the ACLs that match the given options (all by default)",
                 cmd_acl_list), required=False)
    _options(cmd(asub, "remove", "remove every ACL that matches the given options",
                 cmd_acl_remove), required=False)


def _options(c, required: bool) -> None:
    c.add_argument("--principal", required=required, help=PRINCIPAL_SYNTAX)
    c.add_argument("--operation", required=required,
                   help="ALL, READ, WRITE, CREATE, DROP, ALTER or DESCRIBE"
                        + ("" if required else " (or ANY)"))
    c.add_argument("--resource", required=required, help=RESOURCE_SYNTAX)
    c.add_argument("--host", default="*" if required else None,
                   help="client address the ACL applies to" + (" (default *: any)"
                                                               if required else ""))


def _filter(args) -> AclFilter:
    return AclFilter.of(
        resource=parse_resource(args.resource, "--resource") if args.resource else None,
        principal=parse_principal(args.principal, "--principal") if args.principal else None,
        operation=parse_operation(args.operation or "ANY", filter_ok=True),
        host=parse_host(args.host) if args.host else None)


def _doc(acl: AclBinding) -> dict:
    return {"principal": acl.principal, "permission": acl.permission.value,
            "operation": acl.operation.value, "resource": str(acl.resource),
            "resource_type": acl.resource.type.value, "resource_name": acl.resource.name,
            "host": acl.host}


def _emit(args, acls: list[AclBinding], done: str | None = None) -> None:
    docs = [_doc(a) for a in acls]
    if _json(args):
        emit_json(docs)
        return
    if done is not None:
        print(f"{done} {len(docs)} ACL(s)")
    print_table(docs, _COLUMNS)


def cmd_acl_add(args) -> int:
    acl = AclBinding(parse_resource(args.resource, "--resource"),
                     parse_principal(args.principal, "--principal"),
                     parse_operation(args.operation), parse_host(args.host))
    with connect(args, needs="acls") as conn:
        created = conn.admin().create_acls([acl])
    if _json(args):
        emit_json({**_doc(acl), "created": bool(created)})
    else:
        print(f"{'added' if created else 'already present:'} {acl}")
    return 0


def cmd_acl_list(args) -> int:
    wanted = _filter(args)
    with connect(args, needs="acls") as conn:
        acls = conn.admin().list_acls(wanted)
    _emit(args, acls)
    return 0


def cmd_acl_remove(args) -> int:
    if not any((args.resource, args.principal, args.operation, args.host)):
        raise ConfigError("acl remove needs at least one of --resource, --principal, "
                          "--operation, --host (to remove every ACL: --operation ANY)")
    wanted = _filter(args)
    with connect(args, needs="acls") as conn:
        dropped = conn.admin().drop_acls([wanted])
    _emit(args, dropped, "removed")
    return 0
