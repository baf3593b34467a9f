# ruff: noqa: E501  (prose and code samples keep their own line lengths)
"""long bucket, part C: 640 to 1500 tokens of SmolLM2's tokenizer (system + user content)."""

LIBRARY_SQL = """\
-- schema for the community library's lending system (PostgreSQL)

CREATE TABLE members (
    id          SERIAL PRIMARY KEY,
    name        TEXT NOT NULL,
    email       TEXT UNIQUE,
    joined_on   DATE NOT NULL DEFAULT CURRENT_DATE,
    blocked     BOOLEAN NOT NULL DEFAULT FALSE
);

CREATE TABLE titles (
    id          SERIAL PRIMARY KEY,
    isbn        TEXT UNIQUE,
    title       TEXT NOT NULL,
    author      TEXT NOT NULL,
    category    TEXT NOT NULL CHECK (category IN ('fiction', 'non-fiction', 'children', 'comics'))
);

CREATE TABLE copies (
    id          SERIAL PRIMARY KEY,
    title_id    INTEGER NOT NULL REFERENCES titles(id),
    shelf       TEXT,
    withdrawn   BOOLEAN NOT NULL DEFAULT FALSE
);

CREATE TABLE loans (
    id          SERIAL PRIMARY KEY,
    copy_id     INTEGER NOT NULL REFERENCES copies(id),
    member_id   INTEGER NOT NULL REFERENCES members(id),
    loaned_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    due_on      DATE NOT NULL,
    returned_at TIMESTAMPTZ
);

CREATE UNIQUE INDEX one_open_loan_per_copy ON loans (copy_id) WHERE returned_at IS NULL;
CREATE INDEX loans_member ON loans (member_id, loaned_at DESC);

-- query 1: overdue report
SELECT m.name, m.email, t.title, l.due_on,
       CURRENT_DATE - l.due_on AS days_late
FROM loans l
JOIN members m ON m.id = l.member_id
JOIN copies c ON c.id = l.copy_id
JOIN titles t ON t.id = c.title_id
WHERE l.returned_at IS NULL
  AND l.due_on < CURRENT_DATE
ORDER BY days_late DESC;

-- query 2: titles with no copy on the shelf right now
SELECT t.title, t.author, COUNT(c.id) AS copies
FROM titles t
JOIN copies c ON c.title_id = t.id AND NOT c.withdrawn
GROUP BY t.id
HAVING COUNT(c.id) = COUNT(c.id) FILTER (
    WHERE EXISTS (SELECT 1 FROM loans l WHERE l.copy_id = c.id AND l.returned_at IS NULL)
);

-- query 3: block members with three or more overdue items
UPDATE members SET blocked = TRUE
WHERE id IN (
    SELECT member_id FROM loans
    WHERE returned_at IS NULL AND due_on < CURRENT_DATE - INTERVAL '14 days'
    GROUP BY member_id
    HAVING COUNT(*) >= 3
);

-- query 4: most borrowed category per month over the last year
WITH monthly AS (
    SELECT date_trunc('month', l.loaned_at) AS month, t.category, COUNT(*) AS n,
           RANK() OVER (PARTITION BY date_trunc('month', l.loaned_at) ORDER BY COUNT(*) DESC) AS r
    FROM loans l
    JOIN copies c ON c.id = l.copy_id
    JOIN titles t ON t.id = c.title_id
    WHERE l.loaned_at >= now() - INTERVAL '1 year'
    GROUP BY 1, 2
)
SELECT month, category, n FROM monthly WHERE r = 1 ORDER BY month;"""

POLAR_DIARY = """\
Field diary of Ingrid Solberg, glaciologist, Nordfjell ice-cap survey (fictional)

Day 1. Landed at the edge of the ice cap at 11:20 after a bumpy flight from the coast. Four of \
us: me, Tomas (radar), Aiko (weather and logistics) and Pavel (mountain guide). We set up camp \
on a flat shelf of old snow, two tents and a small mess tent. Temperature minus 14, wind light \
from the east. The silence is enormous. Pavel spent the afternoon probing around the camp for \
crevasses and marked a safe area with green flags.

Day 3. First full day of radar work. Tomas and I hauled the sledge with the ground-penetrating \
radar along a six-kilometre line towards the summit dome. The screen shows the ice thickness \
clearly, about 310 metres near camp, thinning to 240 further up, which is the opposite of \
what the old maps from the 1970s suggest. Either the maps were wrong or the ice has changed. \
Aiko launched a weather balloon at 18:00; a storm system is moving in from the south-west.

Day 5. Tent-bound. Winds of 70 km/h overnight, gusts stronger. The mess tent pole snapped at \
03:00 and we spent an hour in the dark lashing it with spare skis. Nobody hurt. We played \
cards, repaired a cracked radar antenna mount with epoxy warmed inside a sleeping bag, and \
Aiko taught us a Japanese counting game. Morale good, mostly.

Day 6. Storm eased at noon. Half a metre of fresh drift buried one of the fuel caches; Pavel \
dug it out in two hours. The radar's cold-start problem is back: below minus 20 the display \
freezes during boot. Tomas's fix is to keep the battery pack inside his jacket until the last \
moment. It works, but it costs us about forty minutes each morning.

Day 9. Reached the summit dome. We drilled a shallow core, twelve metres, in five sections. \
The top layers show clear annual bands; near the bottom there is a dark layer, possibly ash \
from a distant volcanic eruption, which would give us a precise date if the lab confirms it. \
We packed the cores into the insulated boxes and marked them with the depth and orientation \
twice, because mislabelled cores are useless.

Day 11. Tomas's left hand has early frostbite on two fingertips after he took off his glove \
to fix a connector. Pavel rewarmed them in warm water in the tent and we called the coast \
station on the satellite phone. The doctor says it is superficial and should heal, but Tomas \
must keep the hand warm and avoid further exposure. Aiko and I will run the remaining radar \
line on our own.

Day 13. Radar line complete. The whole survey confirms thinning on the upper part of the ice \
cap, between 40 and 70 metres compared with the old maps. We cannot say yet how much is real \
change and how much is error in the old measurements, but even the most generous error bars \
do not explain all of it.

Day 14. Pick-up confirmed for tomorrow at 10:00 if visibility holds. We have started to pack \
the camp. Aiko counted our food: we overestimated by about four days, which is exactly the \
margin Pavel insisted on. I am oddly sad to leave. Tomas says his fingers are itching, which \
the doctor says is a good sign."""

SPANISH_MARKET = """\
A las cinco y media de la mañana, cuando la ciudad todavía duerme, el Mercado de San Telmo ya \
está despierto. Los primeros en llegar son los fruteros, que descargan cajas de naranjas, \
tomates y pimientos de camiones que han viajado toda la noche desde la huerta. Les siguen los \
pescaderos, con sus botas de goma y sus delantales blancos, que colocan con cuidado el hielo \
picado y, encima, los pescados del día: merluza, sardinas, dorada y, si el mar lo ha \
permitido, algún pulpo enorme que atrae las miradas de los niños.

El mercado se construyó en 1928 y su estructura de hierro y cristal fue, en su momento, una \
de las más modernas del país. Durante décadas fue el centro de la vida del barrio: aquí se \
compraba, pero también se hablaba de política, se organizaban bodas y se arreglaban \
desacuerdos entre vecinos. En los años noventa, sin embargo, la llegada de los grandes \
supermercados vació muchos puestos. Llegó a haber más persianas cerradas que abiertas, y el \
ayuntamiento estudió seriamente convertir el edificio en un aparcamiento.

La recuperación empezó casi por casualidad. En 2009, un grupo de jóvenes cocineros alquiló \
tres puestos vacíos para abrir pequeños bares donde se preparaba en el momento lo que los \
clientes compraban en los puestos de al lado. La idea tuvo éxito: el cliente compraba unas \
gambas en la pescadería y, cinco minutos después, se las servían a la plancha con una copa de \
vino. Poco a poco volvieron los clientes, y con ellos nuevos comerciantes.

Hoy el mercado tiene sesenta y dos puestos ocupados y una lista de espera. Conviven la \
carnicería de la familia Ortega, que lleva cuatro generaciones en el mismo lugar, con una \
tienda de quesos artesanales, un puesto de comida peruana y una librería diminuta \
especializada en libros de cocina. Los sábados por la mañana se organizan talleres para niños, \
y los jueves por la tarde hay música en directo.

No todo son buenas noticias. Algunos vecinos mayores se quejan de que los precios han subido y \
de que el mercado se ha llenado de turistas que hacen fotos pero no compran. «Antes venía a \
por mis lentejas y mi pescado y conocía a todo el mundo», dice Carmen, de setenta y ocho años, \
clienta desde niña. «Ahora a veces no encuentro sitio para pasar con el carro.» La asociación \
de comerciantes ha respondido reservando las primeras horas de la mañana, hasta las diez, para \
la compra de los vecinos, sin grupos turísticos, y manteniendo un puesto con productos básicos \
a precios controlados.

Mercedes Ortega, la carnicera, lo resume así: «Un mercado no es un museo. Si no cambia, se \
muere. Pero si cambia demasiado, deja de ser nuestro.»"""

TRIP_EMAILS = """\
From: Jonas  To: Bea, Carlos, Dev
Subject: Lisbon + Porto trip - plan so far
Hi all! Flights are booked: we land in Lisbon on Thursday 10 October at 09:40 (TP 1345 from \
Frankfurt) and fly home from Porto on Monday 14 October at 18:05 (FR 4411). I booked the flat in \
Alfama for Thursday and Friday night, check-in from 15:00, address Rua dos Remédios 28.

From: Bea
Re: Lisbon + Porto trip
Amazing. I'd love to do the tram 28 and the castle on Thursday afternoon, we'll be too tired for \
anything far away. Friday could be Sintra? The palace needs timed tickets; I can book for \
10:30. The train from Rossio takes about 40 minutes.

From: Carlos
Re: Lisbon + Porto trip
Sintra on Friday works. Friday evening I've reserved a table for four at a fado restaurant at \
20:30, Tasca do Chico. Saturday morning we take the train to Porto: the Alfa Pendular at 09:00 \
from Santa Apolónia arrives at 11:49. Tickets bought already, 34 euros each.

From: Dev
Re: Lisbon + Porto trip
Porto hotel: Saturday and Sunday night at Casa Ribeira, near the river, check-in 14:00. \
Saturday afternoon I'd like to walk across the Dom Luís I bridge and visit a port cellar in \
Gaia - I booked a tour at Cálem for 16:00. Sunday is free, but the Livraria Lello bookshop needs \
tickets, maybe in the morning before the crowds?

From: Bea
Re: Lisbon + Porto trip
Lello for Sunday at 09:30, booked. Sunday afternoon, what about a boat trip on the Douro? The \
six-bridges cruise takes 50 minutes and you just turn up. And Monday before the flight we could \
go to the Serralves museum and garden, opening at 10:00. Airport is 30 min by metro.

From: Jonas
Re: Lisbon + Porto trip
Perfect. One change: the Alfama flat wrote that check-in is now from 16:00, not 15:00, but we \
can leave luggage from 12:00. Also, I think we should be at the airport two hours before the \
Monday flight because it's a Friday-crowd airline. Otherwise all good!

From: Carlos
Re: Lisbon + Porto trip
Small thing: the fado restaurant moved us to 21:00 because of a private event. Same place."""

PROMPTS = [
    (
        "code_explain",
        "This SQL file defines a community library's database and four queries used by the "
        "staff. For each of the four queries, explain in two or three sentences what it "
        "returns or changes, and note one edge case it handles well or badly (for example "
        "withdrawn copies, loans due today, ties, members who are already blocked). Then "
        "explain what the partial unique index `one_open_loan_per_copy` guarantees and why a "
        "normal unique index on copy_id would be wrong. Finally, is query 2 correct? If not, "
        "say what it actually returns and propose a fix.\n\n```sql\n" + LIBRARY_SQL + "\n```",
    ),
    (
        "summarize",
        "Summarise this expedition diary in three parts: (1) a five-line timeline of the key "
        "events, with the day number for each; (2) the scientific findings in two sentences, "
        "including how certain they are; (3) the main problems the team faced and how each "
        "was solved, as a bullet list. Do not add events that are not in the diary.\n\n"
        + POLAR_DIARY,
    ),
    (
        "translate",
        "Translate this Spanish feature article about a city market into English. Aim for a "
        "natural magazine style rather than a word-for-word translation, keep the quotations as "
        "quotations, and keep the names of people and places in Spanish. After the "
        "translation, list three Spanish words or phrases from the text that were hard to "
        "translate, with a short note on each.\n\n" + SPANISH_MARKET,
    ),
    (
        "format",
        "Below is an email thread between four friends planning a trip. Build the final "
        "itinerary as a markdown table with the columns Day and date, Time, Activity, "
        "Booking status and Notes. Use the latest information where plans changed, put rows in "
        "time order, and include travel legs (flights, trains, metro to the airport) as their "
        "own rows. After the table, list in bullet points anything that is still unbooked or "
        "unclear, and the latest time they should leave Serralves on Monday.\n\n" + TRIP_EMAILS,
    ),
]

RATE_LIMITER_RS = """\
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A token bucket per client: each client may make `capacity` requests at once,
/// and gets `refill_per_sec` new tokens every second, up to `capacity`.
pub struct RateLimiter {
    capacity: u32,
    refill_per_sec: f64,
    buckets: HashMap<String, Bucket>,
}

struct Bucket {
    tokens: f64,
    last: Instant,
}

impl RateLimiter {
    pub fn new(capacity: u32, refill_per_sec: f64) -> Self {
        RateLimiter { capacity, refill_per_sec, buckets: HashMap::new() }
    }

    /// Returns true if the request is allowed, consuming one token.
    pub fn allow(&mut self, client: &str, now: Instant) -> bool {
        let capacity = self.capacity as f64;
        let bucket = self
            .buckets
            .entry(client.to_string())
            .or_insert(Bucket { tokens: 0.0, last: now });

        let elapsed = now.duration_since(bucket.last).as_secs_f64();
        bucket.tokens = bucket.tokens + elapsed * self.refill_per_sec;
        bucket.last = now;

        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long the client must wait until one request would be allowed.
    pub fn wait_time(&self, client: &str, now: Instant) -> Duration {
        match self.buckets.get(client) {
            None => Duration::ZERO,
            Some(b) => {
                let elapsed = now.duration_since(b.last).as_secs_f64();
                let tokens = b.tokens + elapsed * self.refill_per_sec;
                if tokens >= 1.0 {
                    Duration::ZERO
                } else {
                    Duration::from_secs_f64((1.0 - tokens) / self.refill_per_sec)
                }
            }
        }
    }

    /// Forget clients that have been idle for longer than `idle`.
    pub fn cleanup(&mut self, now: Instant, idle: Duration) {
        self.buckets.retain(|_, b| now.duration_since(b.last) < idle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill() {
        let mut rl = RateLimiter::new(3, 1.0);
        let t0 = Instant::now();
        assert!(rl.allow("a", t0));
        assert!(rl.allow("a", t0));
        assert!(rl.allow("a", t0));
        assert!(!rl.allow("a", t0));
        assert!(rl.allow("a", t0 + Duration::from_secs(1)));
    }

    #[test]
    fn long_idle_does_not_overfill() {
        let mut rl = RateLimiter::new(2, 10.0);
        let t0 = Instant::now();
        assert!(rl.allow("b", t0));
        let later = t0 + Duration::from_secs(60);
        assert!(rl.allow("b", later));
        assert!(rl.allow("b", later));
        assert!(!rl.allow("b", later));
    }
}"""

PHOTOSYNTHESIS_NOTES = """\
Biology 2, lecture 7: Photosynthesis - notes

1. Overview
- Photosynthesis turns light energy into chemical energy stored in sugar.
- Overall: carbon dioxide + water, with light, gives glucose + oxygen. In symbols, 6 CO2 + \
6 H2O -> C6H12O6 + 6 O2.
- Happens in chloroplasts, mainly in the mesophyll cells of leaves.
- The oxygen released comes from splitting water, not from CO2 (shown with isotope-labelling \
experiments in the 1940s).

2. Structure of the chloroplast
- Double membrane around the organelle.
- Inside: stacks of flattened discs called thylakoids (a stack is a granum); the fluid around \
them is the stroma.
- Chlorophyll sits in the thylakoid membranes. It absorbs mainly red and blue light and \
reflects green, which is why leaves look green.

3. Light-dependent reactions (in the thylakoid membranes)
- Light excites electrons in chlorophyll in photosystem II.
- Water is split to replace those electrons: this releases oxygen and hydrogen ions.
- Electrons pass along an electron transport chain to photosystem I; the energy pumps hydrogen \
ions into the thylakoid space.
- Hydrogen ions flow back out through ATP synthase, producing ATP.
- At photosystem I, light boosts the electrons again; they end up reducing NADP+ to NADPH.
- Products passed on: ATP and NADPH. Waste product: oxygen.

4. Calvin cycle (light-independent reactions, in the stroma)
- The enzyme rubisco attaches CO2 to a five-carbon sugar, RuBP.
- The result splits into two three-carbon molecules, which are reduced using ATP and NADPH.
- Some of the three-carbon sugar leaves the cycle to build glucose, sucrose, starch and \
cellulose; the rest regenerates RuBP, which also costs ATP.
- Needs three turns of the cycle to export one three-carbon sugar.
- 'Light-independent' does not mean it happens at night: it depends on ATP and NADPH from the \
light reactions, so in practice it stops in the dark.

5. Limiting factors
- Light intensity, CO2 concentration and temperature.
- At low light, rate rises with light; at high light, something else becomes limiting.
- Temperature affects enzymes such as rubisco: rate rises up to an optimum (about 25 to 35 \
degrees for many temperate plants), then falls as enzymes are damaged.
- Greenhouse growers add CO2 and light to increase yields.

6. Rubisco's weakness
- Rubisco sometimes grabs O2 instead of CO2 (photorespiration), wasting energy.
- Worse in hot, dry conditions when stomata close and CO2 inside the leaf drops.
- C4 plants (maize, sugar cane) and CAM plants (cacti, pineapple) have extra steps that \
concentrate CO2 around rubisco.

Exam tip: be able to say where each stage happens, what goes in, and what comes out."""

PROMPTS += [
    (
        "code_bug",
        "Our Rust token-bucket rate limiter has two failing tests and, we suspect, a third "
        "problem that the tests do not cover. Explain why `burst_then_refill` fails, why "
        "`long_idle_does_not_overfill` fails, and what is wrong with `wait_time` for a client "
        "that has never been seen before compared with `allow`. Give a corrected `allow` "
        "function, keeping the same signature, and one extra test you would add.\n\n"
        "```rust\n" + RATE_LIMITER_RS + "\n```",
    ),
    (
        "format",
        "From these lecture notes, write a quiz for students revising for an exam. Format: "
        "exactly eight multiple-choice questions, numbered, each with four options labelled "
        "A to D and exactly one correct option; then two short-answer questions; then an "
        "answer key as a markdown table with the columns Question, Answer and Where in the "
        "notes (section number). At least two questions must test a common misconception that "
        "the notes correct. Do not ask about anything that is not in the notes.\n\n"
        + PHOTOSYNTHESIS_NOTES,
    ),
]

COOP_MINUTES = """\
Minutes of the general meeting of the Willow Court Housing Cooperative
Date: 14 November. Place: community room. Chair: Grace Mensah. Minutes: Luis Navarro.
Present: 41 of 56 member households (quorum is 29). Also present: Sam Whitley from the \
building surveyor's firm, for item 2 only.

1. Approval of previous minutes. The minutes of the meeting of 9 May were approved without \
changes, 39 in favour, 2 abstentions.

2. Roof and insulation project. Mr. Whitley presented the survey. The roofs of blocks A and B \
are near the end of their life; block C's roof was replaced in 2015 and is fine. Insulating the \
roofs of A and B at the same time as replacing them would cut heating bills by an estimated 15 \
to 20 percent for top-floor flats. The quotes received range from 410,000 to 465,000 euros for \
both blocks. Members asked whether work could happen in winter; Mr. Whitley advised against it \
because of weather delays. After discussion, the meeting voted to proceed with the roof and \
insulation work on blocks A and B in spring and summer next year, choosing the contractor \
Halden Bau at 428,000 euros, which was not the cheapest but offered a ten-year guarantee. Vote: \
35 in favour, 4 against, 2 abstentions. Carried.

3. Financing. The treasurer, Aylin Demir, explained that the reserve fund holds 190,000 euros. \
She proposed taking a bank loan of 250,000 euros over 15 years and raising monthly charges by \
22 euros per household from 1 March to cover repayments. An amendment by Piotr Nowak to limit \
the increase to 15 euros and take the rest from the reserve was rejected, 12 in favour, 27 \
against, 2 abstentions. The original proposal was then carried, 30 in favour, 9 against, 2 \
abstentions. Households in financial difficulty may apply to the hardship fund, which will be \
increased from 5,000 to 8,000 euros.

4. Garden and play area. The garden group asked for 3,500 euros to replace the broken swing \
set and plant a hedge along the road. Approved unanimously. Tomasz Bielski and Hana Sato will \
coordinate, with a deadline of the end of April.

5. Bicycle storage. Several members complained that the bicycle shed is full of abandoned \
bikes. The meeting agreed that bikes will be tagged in January; untagged bikes still there on \
1 March will be donated to a repair charity. Luis Navarro will post the notices.

6. Pets rule. A proposal to allow dogs in all blocks (currently only in ground-floor flats) was \
discussed at length. No vote was taken; the board will prepare a written proposal, including \
rules on noise and shared spaces, for the next general meeting.

7. Board elections. Grace Mensah and Aylin Demir were re-elected for two years. Kemal Arslan \
was elected as a new board member, replacing Ruth Baines, who stood down after six years and \
was thanked warmly by the meeting.

8. Any other business. A member reported that the lift in block B has broken down three times \
in a month. The board will contact the maintenance company this week and report back by email.

The meeting closed at 21:40. Next general meeting: May, date to be announced."""

MYSTERY = """\
The Case of the Missing Trophy

The silver cup for the Harbourside Sailing Club's annual regatta was last seen on Saturday \
evening at 18:00, when the club secretary, Mrs. Okonkwo, locked it in the glass cabinet in the \
clubhouse bar and put the key on the hook behind the bar, as she always did. On Sunday at \
08:30, when she opened up for the prize-giving breakfast, the cabinet was locked but empty.

Only five people had been in the clubhouse between 18:00 and midnight, when the building was \
locked from the outside by the caretaker. The alarm log shows no entries between midnight and \
08:30.

Declan, the barman, worked from 18:00 to 23:30. He says he was behind the bar the whole time, \
except for a ten-minute break at about 21:00, when he went outside to the car park to smoke. \
A neighbour confirms seeing someone smoking by the bins around then.

Freya, last year's winner, who had to return the cup before the new winner was announced, \
arrived at 19:15 and left at 20:00. She says she never went near the cabinet. She is left-handed \
and had her right arm in a sling after a sailing accident on Friday.

Mr. Hargreaves, the club treasurer, was in the back office from 18:30 to 22:45 doing the \
accounts. The back office has a window onto the bar. He says he saw the cup in the cabinet \
when he looked up at around 21:30, 'gleaming under the lights'. He also says he heard the \
cabinet's squeaky hinge at some point but assumed it was Declan.

Priya, a young member, arrived at 20:30 to pick up her jacket, chatted to Declan, and left at \
20:50. She says the bar lights were switched off when she left because Declan was changing a \
bulb and had turned off the main switch; the room was lit only by the emergency light.

The caretaker, Mr. Bell, locked up at midnight. He says he walked through the bar with a torch \
and did not look at the cabinet.

On Sunday, investigators found the cabinet key on its hook, a smear of silver polish on the \
inside of the office window latch, and a tyre track of a bicycle by the back door. Declan \
cycles to work; so does Mr. Hargreaves. Further investigation reveals that the bar's main light \
switch was broken from 21:00 on, after Declan's attempt to change the bulb, and the lights were \
not working for the rest of the night.

One more detail emerged late on Sunday: the club's insurance paperwork, kept in the back \
office, lists the cup's value at 18,000 pounds, and Mr. Hargreaves had recently told a friend \
that the club's accounts 'would not survive another bad year'."""

PROMPTS += [
    (
        "extract",
        "Extract every formal decision from these cooperative meeting minutes into JSON. Return "
        "an object with 'meeting' (date, chair, households_present, quorum_reached) and "
        "'items': an array of objects with item_number, subject, decision (a short sentence, or "
        "null if no decision was taken), votes (object with for, against, abstain; null if "
        "unanimous or no vote), amount_eur (number or null), responsible (array of names) and "
        "deadline (string or null). Include rejected amendments as their own entries with "
        "decision starting 'Rejected:'.\n\n" + COOP_MINUTES,
    ),
    (
        "reasoning",
        MYSTERY + "\n\n"
        "You are the detective. Using only the facts above, work out who most likely took the "
        "trophy. Go through each of the five people in turn and say what speaks for and "
        "against them being the thief, paying attention to the times, the lighting and the "
        "physical clues. Point out which statement contains a detail that cannot be true, and "
        "explain why. Finish with your conclusion and your confidence in it as a percentage.",
    ),
]

REMOTE_POLICY = """\
Flexible and remote work policy - Tessera Design Studio (fictional), version 2.1

Purpose
This policy explains when and how employees can work away from the studio, so that we keep the \
benefits of flexibility while making sure clients, projects and colleagues are well served.

Who it applies to
All employees with a contract of at least six months. Interns and employees in their probation \
period (the first three months) work from the studio, except with their manager's written \
agreement. Freelancers are covered by their own contracts.

Core days and hours
Tuesday and Thursday are studio days for everyone: team meetings, client workshops and reviews \
are scheduled on those days. On other days, employees may work remotely up to three days a \
week in total. Core hours are 10:00 to 15:00 in the studio's time zone, during which everyone \
must be reachable by chat or phone within 30 minutes. Outside core hours, employees organise \
their time as they like, as long as they work their contracted hours.

Working from abroad
Employees may work from another country for up to 20 working days per calendar year, in blocks \
of no more than 10 consecutive working days, and only in countries of the European Economic \
Area. Requests must be sent to the people team at least three weeks before the first day, \
because of tax and insurance rules. Working from outside the EEA is not allowed, even for a \
single day.

Equipment and costs
The studio provides a laptop, a headset and, on request, one external monitor for home use. \
Employees who work remotely at least one day a week receive a monthly allowance of 30 euros for \
internet and electricity, paid with the salary. Furniture is not provided, but the studio will \
reimburse up to 250 euros once every three years for an ergonomic chair, with a receipt. \
Co-working spaces are not reimbursed unless a manager requests their use for a project.

Security
Work is done only on studio devices. Client files may not be stored on personal cloud \
accounts or USB drives. On public Wi-Fi, including in cafés and co-working spaces, the \
studio's VPN must be switched on. Screens must be locked when the employee walks away, and \
client work may not be visible to others in public places.

Health and wellbeing
Employees are expected to take a lunch break of at least 30 minutes and to stop working at a \
reasonable time. Messages outside core hours do not require an immediate answer. Managers hold \
a short check-in with remote workers at least every two weeks.

Exceptions and changes
A manager may ask an employee to come to the studio on an additional day with at least 48 \
hours' notice when a project needs it. An employee may ask for a temporary exception, for \
example after an injury, which the people team will consider case by case. This policy is \
reviewed every year in January."""

PROMPTS += [
    (
        "qa",
        "Answer the employee questions below using only the policy that follows. For each, "
        "start with Yes, No or Depends, then explain in one or two sentences and name the "
        "section you relied on. If the policy does not answer a question, say so instead of "
        "guessing.\n"
        "1. I'm in my second month. Can I work from home on Mondays?\n"
        "2. Can I work from my parents' house in Morocco for one week in December?\n"
        "3. I want to spend 12 working days in a row in Portugal. Is that allowed?\n"
        "4. Will the studio pay for my desk?\n"
        "5. My manager messaged me at 21:00. Do I have to answer tonight?\n"
        "6. Can I work remotely on a Thursday if I finish a client deadline early?\n"
        "7. Can I save client files to my personal Dropbox as a backup?\n\n" + REMOTE_POLICY,
    ),
]

TRANSACTIONS = """\
date,description,amount_eur
2024-09-01,Rent September,-950.00
2024-09-01,Salary Tallis Engineering,2840.00
2024-09-02,Supermarket FreshWay,-63.42
2024-09-03,Train monthly pass,-89.00
2024-09-04,Coffee Bean Corner,-3.80
2024-09-05,Phone contract,-24.99
2024-09-06,Supermarket FreshWay,-41.17
2024-09-07,Cinema Lumière,-22.00
2024-09-08,Transfer from Mia (concert ticket),45.00
2024-09-09,Pharmacy Green Cross,-12.60
2024-09-10,Electricity Voltaria,-58.00
2024-09-11,Coffee Bean Corner,-4.20
2024-09-12,Online bookshop,-31.95
2024-09-13,Supermarket FreshWay,-72.08
2024-09-14,Restaurant Tavola,-48.50
2024-09-15,Gym membership,-35.00
2024-09-17,Bakery Sunrise,-6.40
2024-09-18,Refund online bookshop,31.95
2024-09-19,Supermarket FreshWay,-55.31
2024-09-20,Concert tickets (2),-90.00
2024-09-21,Bike repair Spoke & Chain,-27.00
2024-09-22,Coffee Bean Corner,-3.80
2024-09-24,Internet provider,-34.90
2024-09-25,Supermarket FreshWay,-38.76
2024-09-26,Savings transfer,-400.00
2024-09-27,Restaurant Tavola,-36.00
2024-09-28,Streaming service,-11.99
2024-09-29,Bakery Sunrise,-5.10
2024-09-30,Supermarket FreshWay,-29.44"""

KNOWLEDGE_BASE = """\
You are the virtual assistant of Lumen Energy, a (fictional) electricity supplier. Answer \
customer questions politely and briefly, using only the knowledge base below. If the answer is \
not in the knowledge base, say that you do not know and offer to pass the question to a human \
agent. Never ask for full bank details or passwords. Never promise refunds or credits yourself.

KNOWLEDGE BASE

Tariffs
- Lumen Fixed 24: fixed unit price of 0.29 euros per kWh and a standing charge of 0.45 euros \
per day for 24 months. Leaving early costs 50 euros.
- Lumen Flex: variable unit price, currently 0.31 euros per kWh, standing charge 0.42 euros per \
day. No exit fee. Price changes are announced 30 days in advance.
- Lumen Night Saver: 0.36 euros per kWh from 07:00 to 23:00 and 0.18 euros per kWh from 23:00 to \
07:00. Requires a smart meter. Standing charge 0.47 euros per day.
- All tariffs supply 100% renewable electricity, certified through guarantees of origin.

Meter readings
- Customers with a smart meter do not need to submit readings.
- Others should submit a reading in the app or on the website in the first five days of each \
month. Without a reading, the bill is estimated from past use.
- Photos of the meter can be uploaded in the app under 'Meter' > 'Send a photo'.

Bills and payments
- Bills are issued monthly, on the 8th. Payment is by direct debit on the 20th.
- Customers can change their direct debit date to any day between the 1st and the 28th in \
the app under 'Account' > 'Payments'.
- If a payment fails, we try again after five days. After two failed attempts, a reminder fee \
of 5 euros applies.
- Customers in financial difficulty can ask for a payment plan. Human agents handle these \
requests; the assistant should offer to transfer the customer.

Moving home
- Tell us at least 7 days before the move, with the moving date and final meter reading.
- Fixed 24 customers can take their tariff to the new address without an exit fee if we can \
supply it there.

Smart meters
- Installation is free. Appointments are offered within about four weeks, Monday to Saturday, \
in morning or afternoon slots.
- The installer needs access to the meter for about 90 minutes; power is off for about 30 \
minutes during that time.

Outages
- Power cuts are handled by the local grid operator, not by Lumen. For a power cut, customers \
should call the grid operator's free number 0800 112 112, available 24 hours a day.

Contact
- Human agents: chat or phone 0800 456 789, Monday to Friday 08:00 to 20:00, Saturday 09:00 to \
14:00."""

PROMPTS += [
    (
        "math",
        "Here is my bank account export for September as CSV. Please (1) group every "
        "transaction into one of these categories: housing, groceries, transport, eating_out, "
        "entertainment, health_and_fitness, utilities_and_subscriptions, shopping, savings, "
        "income, refunds_and_transfers_in; (2) give the total per category in a table, with "
        "spending as positive numbers; (3) compute total income, total spending excluding the "
        "savings transfer, and what is left at the end of the month; (4) tell me what "
        "percentage of my salary went on groceries and on eating out combined. Show the sums "
        "for groceries and eating out so I can check them.\n\n```csv\n" + TRANSACTIONS + "\n```",
    ),
    (
        "chat",
        "Hi, I'm moving flat on the 15th of next month and I'm on the Fixed 24 tariff, which I "
        "started last spring. Will I have to pay the 50 euro fee? And also, my last two "
        "payments bounced because my salary now comes on the 25th - can you just cancel the "
        "reminder fees and move my payment date?",
        KNOWLEDGE_BASE,
    ),
]
