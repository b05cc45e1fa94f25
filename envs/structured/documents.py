"""Extraction tasks: a short document in varied styles, and the fields to pull out of it.

Consumes a seeded rng and a rung; produces `Doc`: the document text, the requested fields
(name, JSON Schema fragment, how to phrase it) and the reference values. Difficulty: the
number of fields, values that need normalising (dates to ISO, money to numbers, yes/no to
booleans), line items, a derived total, and distractor values in the text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from envs.phrasing import pick

PEOPLE = ("Dana Reyes", "Omar Haddad", "Lena Fischer", "Kai Nakamura", "Pia Larsen",
          "Ivan Petrov", "Nora Bakker", "Chen Wei", "Fatima Ali", "Jo Murphy")
COMPANIES = ("Northwind", "Bluefin Labs", "Acme Tools", "Greenleaf", "Orbit Media", "Kestrel Co")
CITIES = ("Oslo", "Lisbon", "Turin", "Leeds", "Gdansk", "Tartu", "Porto", "Lyon")
ITEMS = ("desk lamp", "usb cable", "notebook", "chair", "monitor", "keyboard", "headset")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")


@dataclass
class Field:
    """One field to extract: its key, schema, value, and how the prompt asks for it."""

    key: str
    schema: dict
    value: object
    ask: str
    "How the prompt asks for it ('the customer's name')."


@dataclass
class Doc:
    """One source document and the fields to extract from it."""

    family: str
    text: str
    fields: list[Field] = field(default_factory=list)


def _date(rng: random.Random, normalise: bool) -> tuple[str, str]:
    y, m, d = rng.randint(2019, 2026), rng.randint(1, 12), rng.randint(1, 28)
    iso = f"{y:04d}-{m:02d}-{d:02d}"
    if not normalise:
        return iso, iso
    shown = pick(rng, (f"{MONTHS[m - 1]} {d}, {y}", f"{d} {MONTHS[m - 1]} {y}",
                       f"{d:02d}/{m:02d}/{y} (day/month/year)"))
    return shown, iso


def _money(rng: random.Random, normalise: bool) -> tuple[str, float | int]:
    cents = rng.randint(100, 900_000)
    value = cents / 100
    if not normalise:
        whole = cents // 100
        return str(whole), whole
    return pick(rng, (f"${value:,.2f}", f"{value:.2f} USD", f"USD {value:,.2f}")), value


def invoice(rng: random.Random, level: int) -> Doc:
    """An invoice or receipt note."""
    person, company, city = pick(rng, PEOPLE), pick(rng, COMPANIES), pick(rng, CITIES)
    norm = level >= 2
    date_text, iso = _date(rng, norm)
    amount_text, amount = _money(rng, norm)
    number = rng.randint(1000, 99999)
    paid = rng.random() < 0.5
    paid_text = pick(rng, ("It has been paid in full.", "Payment was received.")) if paid \
        else pick(rng, ("Payment is still outstanding.", "It has not been paid yet."))
    lines = [f"Invoice {number} from {company}, {city}.",
             f"Billed to: {person}.", f"Date: {date_text}.", f"Amount due: {amount_text}.",
             paid_text]
    if level >= 3:
        lines.insert(1, f"Reference order {rng.randint(100, 999)}, {rng.randint(2, 9)} boxes.")
    fields = [
        Field("customer", {"type": "string"}, person, "the customer's name"),
        Field("invoice_number", {"type": "integer"}, number, "the invoice number (an integer)"),
        Field("amount", {"type": "number"}, amount, "the amount due as a number"),
        Field("date", {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}, iso,
              "the date as YYYY-MM-DD"),
        Field("paid", {"type": "boolean"}, paid, "whether it is paid (true or false)"),
        Field("vendor", {"type": "string"}, company, "the company that sent it"),
    ]
    return Doc("extract.invoice", " ".join(lines) if rng.random() < 0.5 else "\n".join(lines),
               fields)


def booking(rng: random.Random, level: int) -> Doc:
    """A travel or event booking confirmation e-mail."""
    person, city = pick(rng, PEOPLE), pick(rng, CITIES)
    guests = rng.randint(1, 6)
    nights = rng.randint(1, 9)
    date_text, iso = _date(rng, level >= 2)
    email = person.lower().replace(" ", ".") + "@" + pick(rng, ("mail.com", "example.org"))
    room = pick(rng, ("single", "double", "suite"))
    body = [f"Hello {person.split()[0]},", f"your {room} room in {city} is confirmed for "
            f"{guests} guest{'s' if guests > 1 else ''}, arriving {date_text} for {nights} "
            f"night{'s' if nights > 1 else ''}.", f"We will write to {email}."]
    if level >= 3:
        body.append(f"Breakfast is served from {rng.randint(6, 8)} am; checkout is at "
                    f"{rng.randint(10, 12)}.")
    fields = [
        Field("guest", {"type": "string"}, person, "the guest's full name"),
        Field("city", {"type": "string"}, city, "the city"),
        Field("guests", {"type": "integer", "minimum": 1}, guests, "the number of guests"),
        Field("nights", {"type": "integer", "minimum": 1}, nights, "the number of nights"),
        Field("arrival", {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}, iso,
              "the arrival date as YYYY-MM-DD"),
        Field("room", {"type": "string", "enum": ["single", "double", "suite"]}, room,
              "the room type (single, double or suite)"),
        Field("email", {"type": "string", "pattern": r"^[^@\s]+@[^@\s]+$"}, email,
              "the e-mail address"),
    ]
    return Doc("extract.booking", "\n".join(body), fields)


def order_items(rng: random.Random, level: int) -> Doc:
    """A shop order with line items; rung 4 also asks for the derived total quantity."""
    person = pick(rng, PEOPLE)
    chosen = rng.sample(ITEMS, rng.randint(2, 4))
    items = [{"item": it, "qty": rng.randint(1, 5)} for it in chosen]
    listing = "\n".join(pick(rng, (f"- {i['qty']} x {i['item']}", f"* {i['item']} (qty {i['qty']})"))
                        for i in items)
    text = f"Order for {person}, shipped to {pick(rng, CITIES)}:\n{listing}\n" \
           f"Support ticket {rng.randint(10, 99)} is closed."
    fields = [
        Field("customer", {"type": "string"}, person, "the customer's name"),
        Field("items", {"type": "array", "items": {"type": "object", "properties": {
            "item": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
            "required": ["item", "qty"]}}, items,
              "the ordered items, in order, as objects with `item` and `qty`"),
    ]
    if level >= 4:
        fields.append(Field("total_qty", {"type": "integer"}, sum(i["qty"] for i in items),
                            "the total quantity over all items"))
    return Doc("extract.order", text, fields)


_NOTES = (
    ("customer", "string", "the customer's name", lambda r: pick(r, PEOPLE),
     ("Order placed by {v}.", "This parcel is for {v}.", "Customer: {v}")),
    ("city", "string", "the city", lambda r: pick(r, CITIES),
     ("The meeting takes place in {v}.", "Office location: {v}.", "We ship from {v}.")),
    ("quantity", "integer", "the number of items", lambda r: r.randint(2, 40),
     ("You ordered {v} items.", "Quantity: {v}", "{v} items are on their way.")),
    ("company", "string", "the company name", lambda r: pick(r, COMPANIES),
     ("This offer comes from {v}.", "Sender: {v}.", "Thanks for choosing {v}!")),
)
_FILLER = ("Have a nice day.", "Shipping is free this week.", "Reply if anything is wrong.",
           "Our support team is here to help.")


def short_note(rng: random.Random) -> Doc:
    """Rung 0: one or two sentences, one value written verbatim."""
    key, kind, ask, draw, templates = pick(rng, _NOTES)
    value = draw(rng)
    sentences = [pick(rng, templates).format(v=value)]
    if rng.random() < 0.6:
        sentences.insert(rng.randrange(2), pick(rng, _FILLER))
    return Doc(f"extract.note_{key}", " ".join(sentences),
               [Field(key, {"type": kind}, value, ask)])


def extraction(rng: random.Random, level: int) -> Doc:
    """A document and `level + 1` of its fields (line items from rung 3)."""
    if level <= 0:
        return short_note(rng)
    if level >= 3 and rng.random() < 0.5:
        return order_items(rng, level)
    doc = pick(rng, (invoice, booking))(rng, level)
    n = min(level + 1, len(doc.fields))
    if level <= 1:  # the first rungs ask only for values written verbatim
        plain = [f for f in doc.fields if f.schema.get("type") in ("string", "integer")
                 and f.key not in ("date", "arrival", "amount")]
        doc.fields = rng.sample(plain, min(n, len(plain)))
    else:
        doc.fields = rng.sample(doc.fields, n)
    return doc
