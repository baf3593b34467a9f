# ruff: noqa: E501  (prose and code samples keep their own line lengths)
"""long bucket, part A: 640 to 1500 tokens of SmolLM2's tokenizer (system + user content)."""

POSTMORTEM = """\
Incident report INC-2291: checkout latency and failed payments
Status: resolved. Severity: 2. Author: platform reliability team.

Summary
On Wednesday between 14:05 and 15:47 UTC, about 18% of checkout attempts on the web shop either \
timed out or failed with a generic payment error. Mobile apps were affected in the same way \
because they call the same checkout service. Roughly 4,100 orders could not be completed during \
the window; our support team received 640 contacts about it. No card was charged twice, and no \
customer data was exposed.

Timeline (UTC)
13:52 - A routine deployment of the pricing service (version 7.14) finished. It added a new \
rule engine for regional discounts.
14:05 - The checkout service's p95 latency rose from 420 ms to 2.8 s. Alerts fired for latency \
but not yet for errors, because the error rate was still under the 5% threshold.
14:11 - The on-call engineer, Ravi, acknowledged the page and began looking at the checkout \
dashboards. Database CPU on the orders cluster was normal.
14:24 - Error rate crossed 10%. Support reported a spike in chats about failed payments.
14:31 - The team noticed that the pricing service's connection pool to the promotions database \
was exhausted: all 50 connections were busy, and requests waited in the queue until the \
checkout service gave up after 3 seconds.
14:40 - Ravi proposed rolling back pricing 7.14. The release manager asked to wait because the \
release also contained a tax fix that finance needed before the end of the month.
14:58 - As a compromise, the team raised the pool size to 120. Latency improved for about ten \
minutes, then the promotions database itself hit its own limit of 150 connections, and errors \
rose again to 22%.
15:20 - The incident commander, Sofia, decided to roll back. The tax fix was split out to be \
shipped separately.
15:34 - Rollback to pricing 7.13 completed in all three regions.
15:47 - Error rate and latency back to normal. Incident closed at 16:30 after monitoring.

Root cause
The new rule engine loaded the list of active promotions on every request instead of caching \
it. The query was not slow on its own (about 40 ms), but it held a database connection while \
the engine evaluated each rule in Python, which took 200 to 600 ms for large carts. Under \
normal afternoon traffic of about 300 checkouts per minute, that was enough to keep every \
connection busy. The load test for 7.14 used a cart of three items, so evaluation was fast and \
the problem stayed hidden.

What went well
The latency alert fired within a minute. The support team posted a status-page message at \
14:29, which reduced duplicate contacts. The rollback itself was quick once decided.

What went poorly
We spent 20 minutes debating the rollback because two unrelated changes shipped together. \
Raising the pool size moved the bottleneck to the database and made recovery slower. The error \
alert threshold of 5% was too high for a payment path.

Action items
1. Cache active promotions in the pricing service for 60 seconds (owner: pricing team, due in \
one week).
2. Release the connection before rule evaluation, not after (owner: pricing team, one week).
3. Add load tests with realistic cart sizes taken from last month's orders (owner: QA, two weeks).
4. Lower the checkout error alert to 2% over five minutes (owner: reliability, this week).
5. Agree a rule that urgent fixes ship on their own, so a rollback never blocks them (owner: \
release management, next planning meeting)."""

MEETING_NOTES = """\
Product planning - Marigold reading app - notes taken by Chen
Present: Olivia (product), Chen (design), Marcus (Android), Yasmin (iOS), Kwame (backend), \
Ines (marketing). Apologies: Tobias.

1. Review of last quarter
Olivia opened with the numbers: monthly active readers rose from 212k to 248k, but the share of \
new users who finish their first book within 30 days fell from 31% to 26%. Ines thinks the drop \
is partly because the spring campaign brought in many people who only wanted the free classics. \
Kwame noted that crash-free sessions on Android are at 98.1%, below the 99.5% target, mostly on \
older Samsung tablets.

2. Reading streaks
Chen showed three designs for a streak feature. Everyone liked the calm version that shows a \
small flame under the book cover rather than pop-ups. Yasmin worried that streaks can feel \
stressful; the group agreed to include a 'rest day' that keeps the streak alive once a week. \
Decision: build the calm version with rest days. Chen will hand over final designs by 14 March.

3. Offline mode
Marcus explained that offline downloads fail silently when storage is low. Kwame can add a \
check on the server side, but the real fix belongs in the apps. Decision: both apps show a clear \
message and offer to delete finished books. Marcus and Yasmin will each estimate the work by \
next Monday. Kwame will add a download-size field to the book API by 10 March.

4. Audiobook pilot
Ines presented the publisher offer: 300 audiobooks for a six-month pilot, with revenue sharing. \
Olivia is in favour but wants to see the contract terms on exclusivity first. Kwame said the \
current player cannot stream and would need about three weeks of work. No decision yet; Olivia \
will circulate the contract to the group and schedule a 30-minute call with the publisher.

5. Android stability
Marcus will investigate the Samsung crashes with crash logs from the last two weeks and report \
back at the next meeting. Kwame offered to help if the crashes are related to the new image \
cache.

6. Accessibility
Chen reported on the accessibility review done by an outside consultant in February. The main \
findings: the sepia reading theme has too little contrast for body text, several buttons in \
the library screen have no labels for screen readers, and the font-size slider stops at 150%, \
which is not enough for some readers with low vision. Yasmin noted that iOS already reads the \
labels correctly, so the button issue is Android only. Decision: fix contrast and labels before \
the streak feature ships; raise the font-size limit to 200% in the same release. Chen will \
adjust the sepia palette by 7 March, and Marcus will add the missing labels.

7. Any other business
Ines asked for screenshots of the streak feature for the April newsletter; Chen will send \
mock-ups once designs are final. Yasmin will be on holiday from 24 to 28 March, and Marcus will \
cover iOS release duties that week.

Next meeting: Thursday 21 March, 10:00, meeting room Juniper."""

APP_LOG = """\
02:14:07.455Z INFO  api-gw     req=7f1b POST /v1/cart/items 201 61ms user=u_0923
02:14:08.010Z INFO  worker-2   job=email-digest batch=44 sent=120 failed=0
02:14:09.733Z WARN  api-gw     req=7f1c GET /v1/search?q=lamp 200 812ms slow_query=true
02:14:11.940Z INFO  scheduler  cron=cleanup-sessions deleted=18233 took=1.7s
02:14:13.587Z WARN  db-proxy   pool=primary in_use=47/50 waiters=3
02:14:14.020Z INFO  api-gw     req=7f1e POST /v1/checkout 200 930ms user=u_7710
02:14:14.611Z WARN  db-proxy   pool=primary in_use=50/50 waiters=11
02:14:15.002Z ERROR api-gw     req=7f1f POST /v1/checkout 504 5001ms user=u_1204 upstream=orders
02:14:15.902Z ERROR orders     req=7f1f timeout acquiring db connection after 5000ms
02:14:16.448Z WARN  db-proxy   pool=primary in_use=50/50 waiters=26
02:14:16.777Z INFO  scheduler  cron=rebuild-search-index started full=true
02:14:17.105Z ERROR api-gw     req=7f20 GET /v1/orders/9001 504 5000ms user=u_3321 upstream=orders
02:14:17.880Z INFO  search-idx shard=1/8 rows=250000 reading from primary
02:14:19.003Z ERROR orders     req=7f21 timeout acquiring db connection after 5000ms
02:14:19.310Z INFO  search-idx shard=3/8 rows=250000 reading from primary
02:14:19.998Z WARN  db-proxy   pool=primary in_use=50/50 waiters=41
02:14:20.522Z ERROR api-gw     req=7f22 POST /v1/cart/items 503 12ms user=u_0923 reason=circuit_open
02:14:21.077Z INFO  worker-2   job=email-digest batch=45 sent=0 failed=120 err=db_timeout
02:14:22.640Z INFO  search-idx shard=4/8 rows=250000 reading from primary
02:14:24.118Z WARN  api-gw     health=degraded upstream=orders error_rate=0.37
02:14:29.960Z INFO  search-idx shard=7/8 rows=250000 reading from primary
02:14:31.275Z INFO  search-idx shard=8/8 rows=183412 reading from primary
02:14:33.006Z INFO  scheduler  cron=rebuild-search-index finished took=16.2s
02:14:33.514Z INFO  db-proxy   pool=primary in_use=12/50 waiters=0
02:14:34.087Z INFO  api-gw     req=7f31 POST /v1/checkout 200 402ms user=u_1204
02:14:35.660Z INFO  api-gw     health=ok upstream=orders error_rate=0.01
02:14:36.201Z INFO  worker-2   job=email-digest batch=45 retry=1 sent=120 failed=0"""

INVENTORY_PY = '''\
"""Tiny inventory tracker for the workshop stockroom."""

from dataclasses import dataclass, field
from datetime import date


@dataclass
class Item:
    sku: str
    name: str
    quantity: int = 0
    reorder_level: int = 5
    history: list = field(default_factory=list)


class Inventory:
    def __init__(self):
        self.items = {}

    def add_item(self, sku, name, quantity=0, reorder_level=5):
        if sku in self.items:
            raise KeyError(f"duplicate sku {sku}")
        self.items[sku] = Item(sku, name, quantity, reorder_level)

    def receive(self, sku, amount, when=None):
        """Record a delivery of `amount` units."""
        if amount <= 0:
            raise ValueError("amount must be positive")
        item = self.items[sku]
        item.quantity += amount
        item.history.append((when or date.today(), "in", amount))

    def take(self, sku, amount, when=None):
        """Take `amount` units out; refuse to go below zero."""
        item = self.items[sku]
        if amount > item.quantity + 1:
            raise ValueError(f"only {item.quantity} of {sku} left")
        item.quantity -= amount
        item.history.append((when or date.today(), "out", amount))

    def needs_reorder(self):
        """SKUs at or below their reorder level, lowest stock first."""
        low = [i for i in self.items.values() if i.quantity < i.reorder_level]
        return [i.sku for i in sorted(low, key=lambda i: i.quantity, reverse=True)]

    def used_between(self, sku, start, end):
        """Units taken out of `sku` between start and end, both inclusive."""
        total = 0
        for when, kind, amount in self.items[sku].history:
            if kind == "out" and start < when <= end:
                total += amount
        return total

    def report(self):
        lines = []
        for sku in sorted(self.items):
            item = self.items[sku]
            flag = "  (reorder)" if sku in self.needs_reorder() else ""
            lines.append(f"{sku:<8} {item.name:<20} {item.quantity:>5}{flag}")
        return "\\n".join(lines)


if __name__ == "__main__":
    inv = Inventory()
    inv.add_item("SCR-4", "wood screws 4mm", 200, reorder_level=50)
    inv.add_item("GLU-1", "wood glue 250ml", 6)
    inv.take("GLU-1", 1, date(2024, 5, 2))
    inv.take("SCR-4", 180, date(2024, 5, 3))
    print(inv.report())
    print(inv.used_between("SCR-4", date(2024, 5, 3), date(2024, 5, 31)))
'''

STORY_ORCHARD = """\
The Orchard at Vell

Nobody in Vell remembered who had planted the orchard on the hill above the village, only that \
it had always belonged to whoever was willing to look after it. For eleven years that had been \
Maren Holt, a widow with a bad knee and a good ladder, who spent every autumn climbing into the \
old apple trees with a canvas bag over her shoulder and a pencil behind her ear.

The pencil was for the book. Maren kept a ledger of every tree: when it flowered, how many \
baskets it gave, which branches the wind had taken. The oldest tree, a twisted russet by the \
stone wall, she called the Grandmother. The Grandmother gave small, rough apples that tasted of \
honey and nuts, and every year Maren wrote the same note beside its name: 'still here.'

In the spring of the twelfth year, a young man named Idris arrived from the city with a \
surveyor's tripod and a letter from the regional council. The hill, the letter said, would be \
levelled to make room for a water reservoir. The orchard would be cleared in October, after the \
harvest, 'as a courtesy to local residents.'

Maren read the letter twice, folded it into the ledger, and offered Idris a cup of tea. He \
accepted, mostly because he had walked up the hill in the wrong shoes and needed to sit down. \
She asked him about the reservoir, and he explained it well: the valley's population had doubled, \
the summers were drier, and the old wells were failing. He was not a villain, and she could see \
that he knew it was a hard thing he was carrying up the hill.

Over the summer he came back often, measuring, marking stakes with orange paint. Maren kept \
working as if nothing had changed. She pruned, she mended the fence, she wrote in the ledger. \
Sometimes Idris helped her carry baskets down to the cart. Once, sheltering from a thunderstorm \
under the Grandmother, he asked why she bothered recording everything if the trees would be gone \
by winter.

'Because someone should know what was here,' she said. 'And because numbers are harder to argue \
with than feelings.'

He laughed at that, but in August he asked to borrow the ledger. He returned it a week later \
with a page of his own calculations tucked inside. The orchard, he had worked out, held the soil \
of the whole slope together; its roots slowed the water running off the hill after storms. \
Without it, the new reservoir would fill with mud in a few decades. Moving the reservoir two \
hundred metres east, into a natural hollow, would cost more at first but far less over fifty \
years.

The council took three months to reply. The harvest came and went. Maren picked the Grandmother \
last, as always, and wrote 'still here' in the ledger with a hand that shook a little. In \
December, a second letter arrived: the reservoir would be built in the hollow. The orchard would \
stay.

Idris came up the hill one last time to collect his orange stakes. Maren gave him a bag of the \
small rough apples and a pencil. 'For your own ledger,' she said. He did not have one yet, but \
he kept the pencil."""


PROMPTS = [
    (
        "summarize",
        "You are reading an internal incident report. Write a summary for the company's weekly "
        "leadership email: one short paragraph on what happened and its customer impact, then "
        "three bullet points on the most important lessons. Avoid jargon such as 'p95' or "
        "'connection pool' unless you explain it in a few words.\n\n" + POSTMORTEM,
    ),
    (
        "extract",
        MEETING_NOTES + "\n\n"
        "From the meeting notes above, produce a JSON object with two keys. 'decisions' is an "
        "array of strings, one per decision actually made (not things still open). "
        "'action_items' is an array of objects with the keys owner, task and due (a date string, "
        "or null if no date was given). Output only the JSON.",
    ),
    (
        "classify",
        "Below is a one-minute excerpt of our production logs from the night of 3 November (times "
        "are UTC). Read it carefully "
        "and answer:\n"
        "1. What was the root cause of the 504 errors? Quote the log lines that support your "
        "answer.\n"
        "2. Which services were affected as a consequence, and how?\n"
        "3. Classify each of these as cause, symptom or unrelated: slow search query at "
        "02:14:09, cleanup-sessions cron, circuit_open on the cart, email-digest failure, "
        "thumbnail job.\n"
        "4. Suggest two concrete changes to prevent a repeat.\n\n"
        "```\n" + APP_LOG + "\n```",
    ),
    (
        "code_bug",
        "Please review this Python module from our workshop. It has at least four bugs where "
        "the code does not do what its docstrings or names promise. List each bug with the line "
        "it is on, explain what goes wrong with a concrete example, and give the corrected "
        "line. Then say what the script prints when run as it is.\n\n"
        "```python\n" + INVENTORY_PY + "```",
    ),
    (
        "qa",
        STORY_ORCHARD + "\n\n"
        "Answer these questions about the story, using only what the text says:\n"
        "a) How long had Maren looked after the orchard when Idris arrived?\n"
        "b) What did Maren always write beside the Grandmother's name, and what does it suggest "
        "about her?\n"
        "c) What was Idris's practical argument for keeping the orchard?\n"
        "d) Why do you think Maren gave Idris a pencil at the end?\n"
        "e) In one sentence, what is the story's main theme?",
    ),
]

LEASE = """\
RESIDENTIAL TENANCY AGREEMENT (fictional sample)

This agreement is made on 2 September 2024 between Harbourline Property Management Ltd, acting \
for the owner Mr. Gareth Penrose (the "Landlord"), and Ms. Lucia Ferreira and Mr. Joon-ho Baek \
(together the "Tenants").

1. Property. The Landlord lets to the Tenants the second-floor apartment at 41 Chandler Row, \
Flat 2B, together with the use of one bicycle space in the shared basement storage. The parking \
space numbered 7 is not included and may be rented separately.

2. Term. The tenancy begins on 1 October 2024 and runs for a fixed term of eighteen months, \
ending on 31 March 2026. After the fixed term, it continues from month to month unless either \
party gives notice as described in clause 9.

3. Rent. The rent is 1,450 pounds per calendar month, payable in advance on the first day of \
each month by bank transfer. The first payment is due on signing. The rent may be reviewed once, \
after twelve months, and any increase will not exceed 4 percent.

4. Deposit. The Tenants will pay a deposit of 2,175 pounds, equal to six weeks' rent, which the \
Landlord will protect in a government-approved scheme within 30 days of receiving it. The \
deposit will be returned within 10 days of the end of the tenancy, less any agreed deductions \
for damage beyond normal wear and tear or for unpaid rent.

5. Bills. The Tenants are responsible for electricity, internet and council tax. Water and the \
heating of the building, which is supplied by a shared boiler, are included in the rent.

6. Use of the property. The property may be used only as a private home for the two Tenants. \
The Tenants may not sublet or take in lodgers without written consent. Smoking is not \
permitted anywhere in the building. One cat is allowed; no other pets may be kept without \
written consent, which will not be unreasonably refused.

7. Repairs. The Landlord is responsible for the structure, the roof, the windows, the plumbing, \
the shared boiler and all electrical wiring. The Tenants must report any fault within a \
reasonable time and must replace light bulbs and smoke-alarm batteries themselves. Emergency \
repairs can be reported at any time on the 24-hour line 0800 555 0193.

8. Access. The Landlord or the agent may enter to inspect or repair after giving at least 24 \
hours' written notice, except in an emergency. Routine inspections will happen no more than \
twice a year.

9. Ending the tenancy. Neither party may end the tenancy during the first twelve months except \
for breach of contract. After twelve months, the Tenants may end it by giving two months' \
written notice, and the Landlord by giving four months' written notice, in both cases ending \
on the last day of a month.

10. Condition at the end. The Tenants will return the property clean and in the same condition \
as recorded in the inventory dated 30 September 2024, apart from normal wear and tear. \
Professional carpet cleaning is required only if the cat has caused staining.

11. Insurance. The Landlord insures the building. The Tenants are advised, but not required, \
to insure their own belongings, since the Landlord's policy does not cover them.

12. Keys. The Tenants receive two sets of keys and one fob for the main entrance. Lost fobs \
are replaced for a fee of 35 pounds. Locks may not be changed without the Landlord's consent.

Signed for the Landlord: A. Moreau, Harbourline Property Management Ltd
Signed by the Tenants: L. Ferreira, J. Baek"""

HEAT_REPORT = """\
Cooler Streets: findings from the first summer of the Eastgate shade pilot

Background. Dense neighbourhoods are often several degrees warmer than the countryside around \
them, an effect known as the urban heat island. Dark roofs and asphalt absorb sunlight during \
the day and release the heat slowly at night, so residents get little relief even after \
sunset. In Eastgate, where many older residents live in top-floor flats without air \
conditioning, the city recorded 41 heat-related ambulance calls during the hot summer two years \
ago. The pilot set out to test three cheap measures on six comparable streets.

Method. Two streets received 'cool' pavement coatings, a light-grey sealant that reflects more \
sunlight. Two received street trees in large planters plus fabric sails over the pavement at \
bus stops and crossings. Two were left unchanged as controls. Small weather sensors, mounted \
three metres high on lamp posts, recorded air temperature every ten minutes from June to \
September. Volunteers also measured surface temperatures with handheld infrared thermometers at \
noon on twelve clear days, and 310 residents answered a short survey in September.

Results. On clear afternoons, the coated streets had road surfaces on average 9 degrees cooler \
than the control streets, but the air temperature at three metres was only 0.4 degrees lower, \
and on a few days glare from the bright surface made pedestrians uncomfortable. The streets \
with trees and shade sails showed a smaller surface effect, around 6 degrees, but a larger drop \
in air temperature under the canopy, about 1.5 degrees, and felt-temperature readings in the \
shade were up to 8 degrees lower than in full sun. At night, none of the measures made a \
measurable difference inside flats, according to the twenty households that lent us indoor \
sensors. In the survey, 72 percent of residents on the shaded streets said the street was more \
pleasant to walk along in summer, compared with 38 percent on the coated streets. Older \
residents particularly valued being able to wait for the bus in shade.

Costs. The coating cost about 18 euros per square metre and must be renewed every five to \
seven years. Planters, trees and sails cost more to install, about 2,300 euros per stop or \
crossing, and the young trees needed watering twice a week during dry spells. Three sails were \
torn in a storm in August and had to be replaced.

Limitations. One summer is a short period, and this summer was cooler than average, with only \
nine days above 30 degrees. The streets are comparable but not identical; one of the shaded \
streets is slightly wider and catches more wind.

Recommendations. We recommend extending shade at bus stops, crossings and benches across \
Eastgate, prioritising routes used by older residents, and planting permanent trees in the \
ground where underground pipes allow. Cool coatings may still be useful on car parks and \
playgrounds but should not be a priority for pedestrian streets. Indoor heat at night needs \
different measures, such as reflective roofs and better insulation of top-floor flats, which \
the city should study next.

Next steps. Subject to the council's budget vote in February, the parks department will plant \
forty trees along the two shaded pilot streets in autumn, replacing the planters, and install \
sails at a further twelve bus stops before next June. The sensors will stay in place for a \
second summer so that results can be compared across a hotter season, and we will invite \
residents to a public meeting in March to suggest which stops should come first."""

SUPPORT_CHAT = """\
[09:02] Customer (Hannah): Hi, my washing machine from you is leaking again. Third time now.
[09:02] Agent (Rui): Hello Hannah, I'm sorry to hear that. Could you give me the order number \
or the serial number from the label inside the door?
[09:04] Customer (Hannah): Order 30-77812. Bought in February. Model AquaLine 8.
[09:05] Agent (Rui): Thank you. I can see two earlier repair visits, in May and in July, both \
for a leak at the door seal. Is the water coming from the same place?
[09:06] Customer (Hannah): Yes, from the bottom of the door. There was a puddle in the \
kitchen this morning and it went under the cabinets. I had to take the day off work to dry it.
[09:07] Agent (Rui): That sounds really stressful, I'm sorry. For safety, please don't use the \
machine until it's checked. Did the technician in July replace the seal or only adjust it?
[09:09] Customer (Hannah): He said he replaced it. Honestly I'm losing patience. I paid 649 \
for this and I've had it working properly for maybe four months.
[09:10] Agent (Rui): I understand. Because this is the third fault of the same kind within \
the first year, you are entitled to choose between another repair, a replacement machine, or a \
refund. Would you like me to explain each option?
[09:11] Customer (Hannah): Just tell me what's fastest.
[09:12] Agent (Rui): A replacement can be delivered in about five working days, and the driver \
takes the old machine away. A refund would be the full 649, paid back to your card within 14 \
days after we collect the machine. Another repair visit could happen on Thursday.
[09:14] Customer (Hannah): Replacement. But not the same model, I don't trust it. Do you have \
something similar?
[09:15] Agent (Rui): We could offer the AquaLine 9 Pro, which has a different door design. It \
normally costs 729; as a goodwill gesture I can offer it at no extra cost.
[09:16] Customer (Hannah): OK, that's actually fair. What about the damage to my cabinets?
[09:18] Agent (Rui): I can't decide that myself, but I'll open a claim with our insurance \
team. Please send photos of the damage and any repair quotes to claims@example-appliances.test \
with reference CL-5521. They normally answer within ten working days.
[09:19] Customer (Hannah): Fine. Can the delivery be on a Saturday?
[09:20] Agent (Rui): Saturday deliveries are possible in your area. The first free slot is \
Saturday the 16th, between 8 and 12. Shall I book it?
[09:20] Customer (Hannah): Yes please.
[09:21] Agent (Rui): Done. You'll get a confirmation by email within the hour. Is there \
anything else I can help with today?
[09:22] Customer (Hannah): No, that's all. Thanks for sorting it, Rui. Much better than last \
time I called.
[09:22] Agent (Rui): You're welcome, Hannah. Good luck with the drying, and sorry again for the \
trouble."""

PROMPTS += [
    (
        "extract",
        "Extract the key terms of this tenancy agreement into a JSON object with these keys: "
        "landlord, agent, tenants (array), address, start_date, end_of_fixed_term, "
        "monthly_rent, currency, deposit, max_rent_increase_percent, bills_paid_by_tenants "
        "(array), bills_included (array), pets, tenant_notice_months, landlord_notice_months, "
        "emergency_phone. Use ISO dates (YYYY-MM-DD) and numbers without currency symbols.\n\n"
        + LEASE,
    ),
    (
        "summarize",
        "The following report was written for city engineers. Rewrite its findings as a "
        "summary of about 150 words for residents of Eastgate, in plain language. Make clear "
        "which measure worked better for people on foot and what the city plans next.\n\n"
        + HEAT_REPORT,
    ),
    (
        "classify",
        "Analyse this customer-support chat. Return a JSON object with: customer_sentiment_start "
        "and customer_sentiment_end (each one of angry, frustrated, neutral, satisfied, happy), "
        "issue_category (one of delivery, defect, billing, installation, other), "
        "resolution (a short string), compensation_offered (a short string), follow_up_needed "
        "(boolean) and agent_quality (1 to 5) with a one-sentence justification.\n\n"
        + SUPPORT_CHAT,
    ),
]

CLI_README = """\
# quickcrop

`quickcrop` is a command-line tool that crops, resizes and converts batches of photos.

## Installation

    pipx install quickcrop

## Configuration

quickcrop reads `~/.config/quickcrop/config.toml` if it exists. Values given on the command \
line override the file.

```toml
[defaults]
output_dir = "~/Pictures/cropped"
format = "webp"          # webp, jpeg or png
quality = 82              # 1-100, ignored for png
keep_exif = false
threads = 4

[presets.square]
aspect = "1:1"
size = 1080

[presets.banner]
aspect = "3:1"
size = 1500
gravity = "center"        # center, top, bottom, left, right, face

[presets.thumb]
aspect = "4:3"
size = 320
format = "jpeg"
quality = 70
```

## Options

| option | meaning |
| --- | --- |
| `-p, --preset NAME` | use a preset from the config file |
| `-a, --aspect W:H` | target aspect ratio, for example 16:9 |
| `-s, --size N` | length in pixels of the longer side after cropping |
| `-g, --gravity G` | which part of the picture to keep when cropping |
| `-f, --format F` | output format |
| `-q, --quality Q` | output quality |
| `-o, --output DIR` | where to write results |
| `--keep-exif` | keep camera metadata (location is always removed) |
| `--dry-run` | show what would be done without writing files |
| `-r, --recursive` | also process folders inside the given folders |
| `-j, --threads N` | number of images processed in parallel |

## Behaviour notes

- Input files may be JPEG, PNG, WebP or HEIC. Other files are skipped with a warning.
- Existing output files are never overwritten; a number is added instead, such as \
`beach-1.webp`.
- `gravity = "face"` uses a small built-in face detector and falls back to center when no face \
is found.
- Exit codes: 0 success, 1 some files failed, 2 invalid options, 3 config file could not be \
parsed.

## Troubleshooting

- *"unsupported file type" warnings*: the file extension is not one of the supported formats. \
RAW camera files must be converted first.
- *HEIC files fail on Linux*: install the system package for libheif and try again.
- *Results look blurry*: the requested `--size` is larger than the cropped area of the original, \
so the image was scaled up. Use a smaller size or a larger source.
- *The config file is ignored*: check that the file name ends in `.toml` and that the section \
names are spelled exactly as above; run with `--dry-run` to see which settings were loaded."""

FRENCH_FESTIVAL = """\
Chaque année, à la fin du mois de juin, la petite ville de Montreval, dans le Jura, se \
transforme pendant trois jours en capitale de la musique de rue. Le festival « Pavés sonores » \
est né en 1998 d'une idée toute simple : deux professeurs du conservatoire voulaient que leurs \
élèves jouent ailleurs que dans une salle de concert. Ils ont installé quelques chaises sur la \
place du marché, et une quarantaine de curieux sont venus écouter. Vingt-cinq ans plus tard, le \
festival attire près de trente mille visiteurs et accueille plus de deux cents musiciens, \
amateurs et professionnels, venus de toute l'Europe.

La particularité de « Pavés sonores », c'est qu'il n'y a ni scène principale ni billet \
d'entrée. Les concerts ont lieu dans les cours d'immeubles, sur les marches de l'église, dans \
les jardins privés que les habitants ouvrent pour l'occasion, et même dans la laverie \
automatique de la rue Pasteur, devenue au fil des ans un lieu mythique pour les amateurs de \
jazz. Le programme n'est annoncé que le matin même, sur de grands tableaux noirs installés aux \
entrées de la vieille ville, ce qui oblige les visiteurs à flâner et à se laisser surprendre.

Le financement repose sur un équilibre fragile. La mairie prend en charge la sécurité et le \
nettoyage, une dizaine d'entreprises locales offrent les repas des musiciens, et le reste \
provient des chapeaux que l'on fait passer après chaque concert. Les artistes ne sont pas \
payés, mais ils sont logés chez l'habitant, ce qui crée des amitiés durables : certaines \
familles reçoivent le même violoniste ou le même groupe de cuivres depuis plus de dix ans.

Le succès pose pourtant des questions. Les rues étroites de Montreval ne sont pas faites pour \
accueillir autant de monde, et l'an dernier, les pompiers ont dû fermer deux ruelles pendant \
plusieurs heures. Certains habitants, surtout les plus âgés, se plaignent du bruit tard dans \
la nuit et des déchets laissés sur les trottoirs. Les organisateurs ont donc décidé cette année \
de limiter les concerts à vingt-trois heures, de créer des navettes gratuites depuis les \
parkings situés à l'extérieur de la ville et de recruter une centaine de bénévoles \
supplémentaires pour guider le public.

« Nous ne voulons pas devenir un grand festival comme les autres, avec des barrières et des \
bracelets », explique Claire Dumont, l'une des deux fondatrices, aujourd'hui à la retraite. « \
L'esprit de Pavés sonores, c'est la rencontre. Si un jour il faut payer pour entrer, j'aime \
autant qu'on arrête. » Pour l'instant, la fréquentation continue de grimper, et les habitants, \
malgré quelques réserves, restent dans leur grande majorité attachés à ce rendez-vous qui fait \
vivre leur ville."""

RECIPES = """\
Recipe 1 - Red lentil soup (serves 4)
1 onion, 2 carrots, 2 cloves of garlic, 250 g red lentils, 1 tin chopped tomatoes (400 g), \
1.2 litres vegetable stock, 1 teaspoon ground cumin, juice of half a lemon, olive oil, salt.
Soften the chopped onion and carrots in oil for eight minutes, add garlic and cumin for one \
minute, then the lentils, tomatoes and stock. Simmer for 25 minutes, blend half of it, and \
finish with lemon juice and salt.

Recipe 2 - Baked salmon with potatoes and green beans (serves 2)
2 salmon fillets, 400 g small potatoes, 200 g green beans, 1 lemon, 2 cloves of garlic, a small \
bunch of dill, olive oil, salt and pepper.
Roast halved potatoes with oil and salt at 200 °C for 20 minutes. Add the salmon, topped with \
lemon slices, garlic and dill, and roast 12 minutes more. Steam the beans for five minutes.

Recipe 3 - Chickpea and spinach curry (serves 4)
1 onion, 3 cloves of garlic, a thumb of ginger, 2 tins chickpeas (400 g each), 1 tin coconut \
milk, 1 tin chopped tomatoes (400 g), 200 g fresh spinach, 2 tablespoons curry paste, rice to \
serve (300 g).
Fry onion, garlic and ginger, stir in the curry paste, add tomatoes, coconut milk and drained \
chickpeas. Simmer 15 minutes, stir in the spinach until it wilts, and serve with rice.

Recipe 4 - Weekend pancakes (about 12)
250 g flour, 2 eggs, 400 ml milk, 1 tablespoon sugar, 1 teaspoon baking powder, a pinch of \
salt, butter for the pan, maple syrup and 250 g blueberries to serve.
Whisk the dry ingredients, add eggs and milk, rest the batter for ten minutes, and cook small \
pancakes in a buttered pan for two minutes per side.

Recipe 5 - Greek-style salad (serves 4 as a side)
4 tomatoes, 1 cucumber, 1 red onion, 1 green pepper, 200 g feta, a handful of olives, dried \
oregano, olive oil, red wine vinegar.
Cut everything into chunks, crumble the feta on top, season with oregano, and dress with three \
parts oil to one part vinegar.

Pantry check (already at home): olive oil, salt, pepper, ground cumin, sugar, baking powder, \
dried oregano, 1 kg rice, 500 g flour, 1 litre milk, 1 onion, 1 tin chopped tomatoes."""

PROMPTS += [
    (
        "format",
        "Using only the README below, write a 'Quick start' section for new users in markdown. "
        "It must contain: (1) a numbered list of at most five steps from installation to a "
        "first batch crop, (2) exactly three example commands in a code block, each preceded "
        "by a comment line explaining it, one of which must use a preset and one --dry-run, and "
        "(3) a two-row table explaining what exit codes 1 and 3 mean and what the user should do "
        "about each. Do not invent options that the README does not list.\n\n" + CLI_README,
    ),
    (
        "translate",
        "Read this French newspaper article, then write in English: (a) a translation of the "
        "first paragraph only, (b) a summary of the whole article in about 100 words, and (c) "
        "a list of the three measures the organisers are taking this year.\n\n" + FRENCH_FESTIVAL,
    ),
    (
        "format",
        "I plan to cook all five recipes below this week, each exactly once and for the "
        "servings given. Make a shopping list as a markdown table with columns Item, Total "
        "quantity needed, Already at home, To buy. Combine identical ingredients across "
        "recipes, subtract what the pantry check says I already have, and leave out anything I "
        "do not need to buy in the final 'To buy' column by writing 0. Group the rows by shop "
        "section (vegetables and fruit, fish and dairy, tins and dry goods, spices). After the "
        "table, list any ingredient where you had to guess a quantity.\n\n" + RECIPES,
    ),
]
