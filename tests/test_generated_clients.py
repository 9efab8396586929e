"""Clients generated from the served contracts work, as a client developer would use them.

openapi-python-client (pinned in the dev extras: its output changes between releases) generates a
client from `/v1/`, `/v2/` and `/v3/openapi.json` as a live server serves them. The
generator must print no warning: each one is a part of the contract it skipped (a response, a
request body, a model), so generated clients would silently lack it. The generated v1 client then
drives a live server through its typed `sync_detailed` functions and models: the password grant,
products, both kinds of list filter, a cursor walk, an order paid and its events, and errors read
as the `Problem` model; the v2 client writes and reads money; the v3 client syncs a batch, reads
an expanded order and a list without a count and with one.
"""

import dataclasses
import fcntl
import importlib
import importlib.util
import json
import os
import pathlib
import pkgutil
import subprocess
import sys
import uuid
from http import HTTPStatus
from types import ModuleType

import httpx
import pytest
from support.live import live_server

pytestmark = pytest.mark.slow

ADMIN = {"ADMIN_EMAIL": "client-admin@example.com", "ADMIN_PASSWORD": "client-admin-pass"}
VERSIONS = ("v1", "v2", "v3")
# Far past any id the tests create, and within the contract's int32 bounds.
ABSENT_ID = 2_147_483_647
# The generated clients wait 5 s by default; a live server on a busy machine (other servers,
# the other database's tests) can take longer, and a timeout says nothing about the contract.
TIMEOUT = httpx.Timeout(30)


@dataclasses.dataclass
class GeneratedClient:
    """A generated package, imported; `output` is what the generator printed."""

    version: str
    package: str
    output: str

    def operation(self, tag: str, operation_id: str) -> ModuleType:
        return importlib.import_module(f"{self.package}.api.{tag}.{operation_id}")

    @property
    def models(self) -> ModuleType:
        return importlib.import_module(f"{self.package}.models")

    def anonymous(self, base: str):
        client = importlib.import_module(f"{self.package}.client")
        return client.Client(base_url=f"{base}/{self.version}", timeout=TIMEOUT)

    def authenticated(self, base: str, token: str):
        client = importlib.import_module(f"{self.package}.client")
        return client.AuthenticatedClient(
            base_url=f"{base}/{self.version}", token=token, timeout=TIMEOUT
        )


def _generator_unavailable() -> None:
    # CI installs the dev extras, so a missing generator there is a broken job, not a skip.
    reason = "openapi-python-client is not installed (pip install -e '.[dev]')"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must test the generated clients", pytrace=False)
    pytest.skip(reason)


def _generate(version: str, contract: bytes, directory: pathlib.Path) -> GeneratedClient:
    """Run the generator on one served contract. Each version gets a package name of its own,
    so the clients of all versions can be imported side by side."""
    package = f"shopapi_{version}_client"
    source = directory / f"{version}.json"
    source.write_bytes(contract)
    config = directory / f"{version}-config.yaml"
    config.write_text(
        f"project_name_override: shopapi-{version}-client\npackage_name_override: {package}\n"
    )
    # The generator formats its output with ruff, and says so when it cannot find it: the one
    # in this environment.
    path = os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ["PATH"]])
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "openapi_python_client",
            "generate",
            "--path",
            str(source),
            "--config",
            str(config),
            "--meta",
            "none",
            "--output-path",
            str(directory / package),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=directory,
        env={**os.environ, "PATH": path},
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    return GeneratedClient(version=version, package=package, output=output)


def _generate_both(directory: pathlib.Path) -> dict[str, GeneratedClient]:
    directory.mkdir()
    with live_server(f"sqlite:///{directory / 'unused.db'}") as base:
        contracts = {}
        for version in VERSIONS:
            response = httpx.get(f"{base}/{version}/openapi.json", timeout=TIMEOUT)
            assert response.status_code == 200, response.text
            contracts[version] = response.content
    return {
        version: _generate(version, contract, directory) for version, contract in contracts.items()
    }


@pytest.fixture(scope="session")
def generated(tmp_path_factory, worker_id):
    """Every version's client, generated once from a server of their own: the contract does not
    depend on the data (that server never touches its database), and the flows on SQLite and on
    PostgreSQL drive the same clients. Under pytest-xdist, once a run: the first worker to need
    them generates them into the run's directory, the others wait for it (tens of seconds of
    CPU each). Their packages are importable for the session and forgotten after it."""
    if importlib.util.find_spec("openapi_python_client") is None:
        _generator_unavailable()
    run_directory = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        run_directory = run_directory.parent  # this run's, shared by its workers
    directory = run_directory / "generated-clients"
    outputs = directory / "outputs.json"
    with (run_directory / "generated-clients.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not outputs.exists():
            clients = _generate_both(directory)
            outputs.write_text(json.dumps([dataclasses.asdict(c) for c in clients.values()]))
    clients = {c["version"]: GeneratedClient(**c) for c in json.loads(outputs.read_text())}
    sys.path.insert(0, str(directory))
    importlib.invalidate_caches()
    yield clients
    sys.path.remove(str(directory))
    for client in clients.values():
        for name in [m for m in sys.modules if m.partition(".")[0] == client.package]:
            del sys.modules[name]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_generator_prints_no_warning(generated, version):
    # A clean run prints only the line naming the output directory; anything else is a warning
    # about a part of the contract left out of the client.
    output = generated[version].output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("Generating "), output


@pytest.mark.parametrize("version", VERSIONS)
def test_every_generated_module_imports(generated, version):
    """A client developer imports what they need, any of it: every module of the package, not
    only those the flows below use, must import."""
    package = importlib.import_module(generated[version].package)
    modules = list(pkgutil.walk_packages(package.__path__, f"{package.__name__}."))
    assert len(modules) > 50
    for module in modules:
        importlib.import_module(module.name)


@pytest.fixture(scope="module")
def server(database_url):
    with live_server(database_url, **ADMIN) as base:
        yield base


def log_in(client: GeneratedClient, base: str):
    """An admin's client, logged in with the password grant through the generated
    `issue_token` (a form-encoded body)."""
    models = client.models
    response = client.operation("auth", "issue_token").sync_detailed(
        client=client.anonymous(base),
        body=models.TokenRequest(
            grant_type=models.TokenRequestGrantType.PASSWORD,
            username=ADMIN["ADMIN_EMAIL"],
            password=ADMIN["ADMIN_PASSWORD"],
        ),
    )
    token = expect(response, HTTPStatus.OK)
    return client.authenticated(base, token.access_token)


@pytest.fixture(scope="module")
def v1(generated, server):
    return generated["v1"], log_in(generated["v1"], server)


@pytest.fixture(scope="module")
def v2(generated, server):
    return generated["v2"], log_in(generated["v2"], server)


@pytest.fixture(scope="module")
def v3(generated, server):
    return generated["v3"], log_in(generated["v3"], server)


def expect(response, status: HTTPStatus):
    """The body the generated client parsed, which must be a model (not None: a response the
    client was generated without parses as None)."""
    assert response.status_code == status, (response.status_code, response.content[:2000])
    parsed = response.parsed
    assert parsed is not None and hasattr(parsed, "to_dict"), (
        f"{response.status_code}: the client parsed {parsed!r} from {response.content[:500]!r}"
    )
    return parsed


def expect_problem(client: GeneratedClient, response, status: HTTPStatus):
    """An error, parsed as the contract's one `Problem` model, whatever the operation."""
    problem_model = client.models.Problem
    assert response.status_code == status, (response.status_code, response.content[:2000])
    problem = response.parsed
    assert isinstance(problem, problem_model), (
        f"{response.status_code} parsed as {type(problem).__name__}, not Problem: "
        f"{response.content[:500]!r}"
    )
    assert problem.status == status
    assert isinstance(problem.title, str)
    assert problem.title
    return problem


def tag() -> str:
    """A marker unique to one test, in SKUs and names, so that the lists it reads hold only what
    it made, whatever else the database holds."""
    return f"GC{uuid.uuid4().hex[:8].upper()}"


def create_product(client: GeneratedClient, api, **fields):
    response = client.operation("products", "create_product").sync_detailed(
        client=api, body=client.models.ProductInput(**fields)
    )
    return expect(response, HTTPStatus.CREATED)


def create_user(client: GeneratedClient, api, marker: str):
    response = client.operation("users", "create_user").sync_detailed(
        client=api,
        body=client.models.UserInput(
            email=f"{marker.lower()}@example.com", name=f"User {marker}", password="correct horse"
        ),
    )
    return expect(response, HTTPStatus.CREATED)


def test_v1_creates_and_reads_a_product(v1, server):
    client, api = v1
    marker = tag()
    created = create_product(
        client, api, sku=f"{marker}-1", name=f"Mug {marker}", price_cents=1250, stock=3
    )
    assert (created.sku, created.price_cents, created.stock) == (f"{marker}-1", 1250, 3)
    response = client.operation("products", "get_product").sync_detailed(created.id, client=api)
    product = expect(response, HTTPStatus.OK)
    assert (product.id, product.name, product.currency) == (created.id, f"Mug {marker}", "EUR")


def test_v1_lists_filtered_by_in_and_contains(v1):
    client, api = v1
    marker = tag()
    names = [f"Mug {marker} one", f"MUG {marker} two", f"Plate {marker}"]
    products = [
        create_product(client, api, sku=f"{marker}-{n}", name=name, price_cents=100)
        for n, name in enumerate(names)
    ]
    list_products = client.operation("products", "list_products")

    # `sku[in]` takes a list: the generated client chooses how it goes on the wire.
    response = list_products.sync_detailed(
        client=api, skuin=[products[0].sku, products[2].sku], per_page=100
    )
    page = expect(response, HTTPStatus.OK)
    assert sorted(p.sku for p in page.data) == sorted([products[0].sku, products[2].sku]), (
        response.content[:2000]
    )

    # `[contains]` ignores the case of ASCII letters.
    response = list_products.sync_detailed(
        client=api, namecontains=f"mug {marker.lower()}", per_page=100
    )
    page = expect(response, HTTPStatus.OK)
    assert sorted(p.id for p in page.data) == [products[0].id, products[1].id]


def test_v1_walks_a_list_by_cursor_to_its_end(v1):
    client, api = v1
    marker = tag()
    created = [
        create_product(client, api, sku=f"{marker}-{n}", name=f"Item {marker} {n}", price_cents=5)
        for n in range(5)
    ]
    list_products = client.operation("products", "list_products")
    unset = importlib.import_module(f"{client.package}.types").UNSET
    seen, cursor, pages = [], unset, 0
    while True:
        response = list_products.sync_detailed(
            client=api, skucontains=marker, per_page=2, cursor=cursor
        )
        page = expect(response, HTTPStatus.OK)
        seen.extend(p.id for p in page.data)
        pages += 1
        assert pages <= 5, f"no end after {pages} pages: {seen}"
        if page.meta.next_cursor is None:
            break
        cursor = page.meta.next_cursor
    assert seen == [p.id for p in created]  # each once, in the default order (id)
    assert pages == 3


def test_v1_places_an_order_pays_it_and_finds_its_events(v1):
    client, api = v1
    models = client.models
    marker = tag()
    product = create_product(client, api, sku=f"{marker}-1", name=marker, price_cents=700, stock=5)
    customer = create_user(client, api, marker)

    response = client.operation("orders", "create_order").sync_detailed(
        client=api,
        body=models.NewOrder(
            user_id=customer.id, items=[models.OrderItem(product_id=product.id, quantity=2)]
        ),
    )
    order = expect(response, HTTPStatus.CREATED)
    assert (order.status, order.total_cents) == (models.OrderStatus.PENDING, 1400)

    response = client.operation("orders", "update_order").sync_detailed(
        order.id, client=api, body=models.OrderChange(status=models.OrderStatus.PAID)
    )
    assert expect(response, HTTPStatus.OK).status == models.OrderStatus.PAID

    # A paid order cannot go back to pending.
    response = client.operation("orders", "update_order").sync_detailed(
        order.id, client=api, body=models.OrderChange(status=models.OrderStatus.PENDING)
    )
    expect_problem(client, response, HTTPStatus.CONFLICT)

    list_events = client.operation("events", "list_events")
    response = list_events.sync_detailed(
        client=api,
        resource_type=models.ListEventsResourceType.ORDER,
        resource_id=order.id,
        per_page=100,
    )
    events = expect(response, HTTPStatus.OK).data
    # The generator names a property `type` as `type_`: `type` is a Python builtin.
    assert [str(event.type_) for event in events] == ["order.created", "order.status_changed"]
    assert events[-1].data["status"] == "paid"


def test_v1_errors_parse_as_problems(v1):
    client, api = v1
    models = client.models
    response = client.operation("products", "get_product").sync_detailed(ABSENT_ID, client=api)
    expect_problem(client, response, HTTPStatus.NOT_FOUND)

    marker = tag()
    create_product(client, api, sku=f"{marker}-1", name=marker, price_cents=1)
    response = client.operation("products", "create_product").sync_detailed(
        client=api, body=models.ProductInput(sku=f"{marker}-1", name="Again", price_cents=1)
    )
    expect_problem(client, response, HTTPStatus.CONFLICT)  # the SKU is taken

    customer = create_user(client, api, marker)
    response = client.operation("orders", "create_order").sync_detailed(
        client=api,
        body=models.NewOrder(
            user_id=customer.id, items=[models.OrderItem(product_id=ABSENT_ID, quantity=1)]
        ),
    )
    problem = expect_problem(client, response, HTTPStatus.UNPROCESSABLE_ENTITY)
    assert problem.errors, response.content  # points at the unknown product


def test_v2_writes_and_reads_money(v2):
    client, api = v2
    models = client.models
    marker = tag()
    response = client.operation("products", "create_product").sync_detailed(
        client=api,
        body=models.ProductInput(
            sku=f"{marker}-1",
            name=f"Mug {marker}",
            price=models.Money(amount="12.50", currency="EUR"),
        ),
    )
    created = expect(response, HTTPStatus.CREATED)
    assert (created.price.amount, created.price.currency) == ("12.50", "EUR")
    response = client.operation("products", "get_product").sync_detailed(created.id, client=api)
    product = expect(response, HTTPStatus.OK)
    assert isinstance(product.price, models.Money), type(product.price)
    assert product.price.amount == "12.50"


def test_v3_syncs_a_batch_expands_an_order_and_counts_only_when_asked(v3):
    client, api = v3
    models = client.models
    marker = tag()
    batch = models.ProductBatch(
        products=[
            models.ProductInput(
                sku=f"{marker}-{n}",
                name=f"Mug {marker} {n}",
                price=models.Money(amount=f"{n}.50", currency="EUR"),
                stock=10,
            )
            for n in range(1, 4)
        ]
    )
    upsert = client.operation("products", "upsert_products")
    synced = expect(upsert.sync_detailed(client=api, body=batch), HTTPStatus.OK)
    assert [p.sku for p in synced.data] == [f"{marker}-{n}" for n in range(1, 4)]
    bad = models.ProductBatch(
        products=[
            batch.products[0],
            models.ProductInput(
                sku=f"{marker}-1", name="x", price=models.Money(amount="1", currency="EUR")
            ),
        ]
    )
    problem = expect_problem(
        client, upsert.sync_detailed(client=api, body=bad), HTTPStatus.UNPROCESSABLE_ENTITY
    )
    assert problem.errors, problem

    user = create_user(client, api, marker)
    placed = client.operation("orders", "create_order").sync_detailed(
        client=api,
        body=models.NewOrder(
            user_id=user.id,
            items=[models.OrderItem(product_id=p.id, quantity=1) for p in synced.data[:2]],
        ),
    )
    order = expect(placed, HTTPStatus.CREATED)
    expand = [models.OrderExpansion.USER, models.OrderExpansion.ITEMS_PRODUCT]
    response = client.operation("orders", "get_order").sync_detailed(
        order.id, client=api, expand=expand
    )
    expanded = expect(response, HTTPStatus.OK)
    assert expanded.user.email == user.email
    assert [item.product.sku for item in expanded.items] == [f"{marker}-1", f"{marker}-2"]

    listing = client.operation("orders", "list_orders")
    uncounted = expect(listing.sync_detailed(client=api, user_id=user.id), HTTPStatus.OK)
    assert len(uncounted.data) == 1
    assert "total" not in uncounted.meta.to_dict()
    # A list read without `fields` holds whole orders: each one as the single order's type,
    # every field required, as docs/clients.md says.
    whole = models.Order.from_dict(uncounted.data[0].to_dict())
    assert (whole.id, whole.total.amount, whole.status) == (
        order.id,
        order.total.amount,
        order.status,
    )
    counted = listing.sync_detailed(client=api, user_id=user.id, prefer="count=exact")
    assert expect(counted, HTTPStatus.OK).meta.total == 1
