// cost-tables: the guide's cost tables on this machine, beside the peers, in one run.

#if canImport(Glibc)
  import Glibc
#endif
// Usage: swift run -c release cost-tables [--quick] [--json FILE] [--filter SUBSTRING]

var arguments = CommandLine.arguments.dropFirst()
var quick = false
var jsonPath: String?
var filter: String?
while let argument = arguments.popFirst() {
  switch argument {
  case "--quick": quick = true
  case "--json": jsonPath = arguments.popFirst()
  case "--filter": filter = arguments.popFirst()
  default:
    print("usage: cost-tables [--quick] [--json FILE] [--filter SUBSTRING]")
    exit(2)
  }
}

let harness = Harness(quick: quick, filter: filter)
for row in harness.rows {
  print(row.benchmark, row.subject, row.median)
}
