// What a TypeScript client of shopapi writes against the types that openapi-typescript
// generates from the served contracts. tests/test_contract_tools.py generates ./v1.ts, ./v2.ts, ./v3.ts
// beside a copy of this file and compiles them together with `tsc --strict --noEmit`: the file
// compiles only if those types describe the representations well enough to build and read them.
import type { paths as V1 } from "./v1";
import type { paths as V2 } from "./v2";
import type { paths as V3 } from "./v3";

// Indexed access, as a client writes it: `infer` would pick one side of an intersection (what
// `allOf` becomes) and hide what the other side does to the type.
type Ok<Operation extends { responses: { 200: { content: { "application/json": unknown } } } }> =
  Operation["responses"][200]["content"]["application/json"];
type JsonBody<
  Operation extends { requestBody: { content: { "application/json": unknown } } },
> = Operation["requestBody"]["content"]["application/json"];

// Version 1: money as integer minor units.
type V1ListedProduct = Ok<V1["/products"]["get"]>["data"][number];
type V1Product = Ok<V1["/products/{id}"]["get"]>;
type V1NewProduct = JsonBody<V1["/products"]["post"]>;
type V1ProductChanges =
  V1["/products/{id}"]["patch"]["requestBody"]["content"]["application/merge-patch+json"];
type V1ListedOrder = Ok<V1["/orders"]["get"]>["data"][number];
type V1Order = Ok<V1["/orders/{id}"]["get"]>;
type V1NewOrder = JsonBody<V1["/orders"]["post"]>;

export const v1ListedProduct: V1ListedProduct = {
  id: 1,
  sku: "MUG-001",
  name: "Coffee mug",
  description: null,
  price_cents: 1250,
  currency: "EUR",
  stock: 10,
  category: "kitchen",
  active: true,
  created_at: "2026-11-26T10:00:00.000000Z",
  updated_at: "2026-11-26T10:00:00.000000Z",
};

export function v1PriceCents(product: V1Product): number {
  return product.price_cents;
}

// Only what the API requires: the rest takes its default (`currency`, `stock`, `active`).
export const v1NewProduct: V1NewProduct = {
  sku: "MUG-001",
  name: "Coffee mug",
  price_cents: 1250,
};

// A merge patch: only the fields that change.
export const v1ProductChanges: V1ProductChanges = { name: "Big coffee mug" };

export const v1ListedOrder: V1ListedOrder = {
  id: 1,
  user_id: 1,
  status: "pending",
  items: [{ product_id: 1, quantity: 2, unit_price_cents: 1250 }],
  total_cents: 2500,
  currency: "EUR",
  note: null,
  created_at: "2026-11-26T10:00:00.000000Z",
  updated_at: "2026-11-26T10:00:00.000000Z",
};

export function v1OrderTotalCents(order: V1Order): number {
  return order.total_cents;
}

export function v1UnitPricesCents(order: V1Order): (number | undefined)[] {
  return order.items.map((item) => item.unit_price_cents);
}

export const v1NewOrder: V1NewOrder = {
  user_id: 1,
  items: [{ product_id: 1, quantity: 2 }],
  note: "Leave at the door.",
};

// Version 2: money as {amount: "12.50", currency: "EUR"}, the amount a decimal string.
type V2ListedProduct = Ok<V2["/products"]["get"]>["data"][number];
type V2Product = Ok<V2["/products/{id}"]["get"]>;
type V2NewProduct = JsonBody<V2["/products"]["post"]>;
type V2ListedOrder = Ok<V2["/orders"]["get"]>["data"][number];
type V2Order = Ok<V2["/orders/{id}"]["get"]>;

export const v2ListedProduct: V2ListedProduct = {
  id: 1,
  sku: "MUG-001",
  name: "Coffee mug",
  description: null,
  price: { amount: "12.50", currency: "EUR" },
  stock: 10,
  category: "kitchen",
  active: true,
  created_at: "2026-11-26T10:00:00.000000Z",
  updated_at: "2026-11-26T10:00:00.000000Z",
};

export function v2Price(product: V2Product): { amount: string; currency: string } {
  const amount: string = product.price.amount;
  const currency: string = product.price.currency;
  return { amount, currency };
}

// Only what the API requires: the rest takes its default (`stock`, `active`).
export const v2NewProduct: V2NewProduct = {
  sku: "MUG-001",
  name: "Coffee mug",
  price: { amount: "12.5", currency: "EUR" },
};

export const v2ListedOrder: V2ListedOrder = {
  id: 1,
  user_id: 1,
  status: "pending",
  items: [{ product_id: 1, quantity: 2, unit_price: { amount: "12.50", currency: "EUR" } }],
  total: { amount: "25.00", currency: "EUR" },
  note: null,
  created_at: "2026-11-26T10:00:00.000000Z",
  updated_at: "2026-11-26T10:00:00.000000Z",
};

export function v2OrderTotal(order: V2Order): string {
  const amount: string = order.total.amount;
  return `${amount} ${order.total.currency}`;
}

export function v2UnitPrices(order: V2Order): (string | undefined)[] {
  return order.items.map((item) => item.unit_price?.amount);
}

// Version 3: v2's money; lists counted only when asked; orders that bring their user and
// products (`expand`); a catalogue batch.
type V3OrderList = Ok<V3["/orders"]["get"]>;
type V3Order = Ok<V3["/orders/{id}"]["get"]>;
type V3Expand = NonNullable<NonNullable<V3["/orders/{id}"]["get"]["parameters"]["query"]>["expand"]>;
type V3Batch = JsonBody<V3["/products/batch"]["post"]>;
type V3BatchResult = Ok<V3["/products/batch"]["post"]>;

export const v3Expand: V3Expand = ["user", "items.product"];

export function v3Total(list: V3OrderList): number | undefined {
  // Absent unless `Prefer: count=...` asked for it.
  return list.meta.total;
}

export function v3Customer(order: V3Order): string | undefined {
  return order.user?.email;
}

export function v3ProductNames(order: V3Order): (string | undefined)[] {
  return order.items.map((item) => item.product?.name);
}

export const v3Batch: V3Batch = {
  products: [{ sku: "MUG-001", name: "Coffee mug", price: { amount: "12.50", currency: "EUR" } }],
};

export function v3BatchIds(result: V3BatchResult): number[] {
  return result.data.map((product) => product.id);
}

// A list's items are typed with every field optional (`fields=` answers only some); a page
// read without `fields` holds whole orders, every field required (docs/clients.md).
export function v3WholeOrders(list: V3OrderList): V3Order[] {
  return list.data as V3Order[];
}

export function v3Totals(list: V3OrderList): string[] {
  return v3WholeOrders(list).map((order) => order.total.amount);
}
