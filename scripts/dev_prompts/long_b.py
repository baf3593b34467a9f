# ruff: noqa: E501  (prose and code samples keep their own line lengths)
"""long bucket, part B: 640 to 1500 tokens of SmolLM2's tokenizer (system + user content)."""

EVENT_BUS_JS = """\
// eventbus.js - a tiny publish/subscribe helper used by the dashboard widgets.

const WILDCARD = '*';

export class EventBus {
  constructor({ maxListeners = 50, onError = console.error } = {}) {
    this.listeners = new Map();   // event name -> array of { fn, once }
    this.maxListeners = maxListeners;
    this.onError = onError;
    this.history = [];            // last few events, for late subscribers
    this.historySize = 20;
  }

  on(event, fn, { once = false, replay = false } = {}) {
    if (typeof fn !== 'function') {
      throw new TypeError(`listener for "${event}" must be a function`);
    }
    const list = this.listeners.get(event) ?? [];
    if (list.length >= this.maxListeners) {
      this.onError(new Error(`too many listeners for "${event}" (${list.length})`));
    }
    list.push({ fn, once });
    this.listeners.set(event, list);

    if (replay) {
      for (const past of this.history) {
        if (past.event === event || event === WILDCARD) {
          this.#call(fn, past.payload, past.event);
        }
      }
    }
    return () => this.off(event, fn);
  }

  once(event, fn) {
    return this.on(event, fn, { once: true });
  }

  off(event, fn) {
    const list = this.listeners.get(event);
    if (!list) return false;
    const index = list.findIndex((entry) => entry.fn === fn);
    if (index === -1) return false;
    list.splice(index, 1);
    if (list.length === 0) this.listeners.delete(event);
    return true;
  }

  emit(event, payload) {
    this.history.push({ event, payload, at: Date.now() });
    if (this.history.length > this.historySize) this.history.shift();

    const direct = this.listeners.get(event) ?? [];
    const wild = event === WILDCARD ? [] : this.listeners.get(WILDCARD) ?? [];
    let delivered = 0;
    for (const entry of [...direct, ...wild]) {
      if (entry.once) this.off(entry === wild.find((w) => w === entry) ? WILDCARD : event, entry.fn);
      this.#call(entry.fn, payload, event);
      delivered += 1;
    }
    return delivered;
  }

  #call(fn, payload, event) {
    try {
      const result = fn(payload, event);
      if (result && typeof result.then === 'function') {
        result.catch((err) => this.onError(err));
      }
    } catch (err) {
      this.onError(err);
    }
  }
}

// Usage in the dashboard:
// const bus = new EventBus({ maxListeners: 10 });
// const stop = bus.on('price:update', (p) => chart.push(p), { replay: true });
// bus.once('session:expired', () => showLoginDialog());
// bus.on('*', (payload, name) => debugPanel.log(name, payload));
// bus.emit('price:update', { symbol: 'ACME', value: 41.7 });
// stop();
"""

OUTAGE_CHAT = """\
#ops-warroom, Saturday
07:58 dmitri: anyone else seeing the status page red for EU? my phone is buzzing non stop
08:00 aisha: looking. storage latency on eu-west is through the roof, 30s+ on some writes
08:01 dmitri: customers can't upload photos, support tweeting already
08:03 aisha: it's not the app servers, they're idle waiting on storage. paging the storage \
on-call
08:06 ken (storage on-call): here. one of the three storage nodes, st-eu-2, started a disk \
rebuild at 07:41 after a drive failed. that's expected, the rebuild is supposed to be throttled
08:07 ken: throttle is not applied. someone changed the rebuild priority to 'high' in the \
config last week, looks like for a test
08:08 aisha: can we lower it live?
08:09 ken: yes but it needs a restart of the storage daemon on that node, which drops its \
connections. the other two nodes should take the traffic
08:10 dmitri: do it, uploads are failing anyway
08:12 ken: restarting st-eu-2
08:14 ken: restarted with priority low. rebuild continuing at ~80 MB/s instead of ~400
08:16 aisha: write latency dropping. p99 now 2.1s, was 34s
08:19 aisha: uploads succeeding again, error rate on the upload API back to 0.3%
08:21 dmitri: I'll update the status page to monitoring
08:25 ken: found the change: PR 4410 by priya, merged Tuesday, 'temporary: speed up rebuild \
for load test'. it was never reverted
08:26 priya: oh no, that's mine. the load test was cancelled and I forgot the config change \
was in the same PR. really sorry
08:27 aisha: happens. we need a guard for this, not blame
08:31 ken: rebuild will take about 6 more hours at this rate. during that time we have no \
redundancy for ~8% of objects on that node
08:33 dmitri: is that a risk we should tell customers about?
08:35 ken: data is still on the other replicas so nothing is lost unless a second drive in the \
same set fails. low probability. I'd rather not alarm people, but management should know
08:40 aisha: agreed, I'll write to Helena
09:02 dmitri: status page set to resolved for uploads, keeping an eye on it
14:47 ken: rebuild finished, full redundancy restored
15:10 aisha: I'll schedule the postmortem for Monday. action ideas so far: config changes marked \
temporary need an expiry date, alert when a rebuild runs unthrottled, and app should show a \
friendly retry message instead of a generic error when uploads time out"""

PRINTING_ESSAY = """\
How the printing press changed who could know things

Before the middle of the fifteenth century, almost every book in Europe was copied by hand. A \
skilled scribe working in a monastery or a university town might produce two or three pages a \
day, and a single large volume, such as a Bible, could take more than a year. Books were \
therefore rare and expensive, and most were owned by churches, universities and wealthy \
families. Reading was a skill that relatively few people had, partly because there was so little \
to read.

Around 1450, in the German city of Mainz, the goldsmith Johannes Gutenberg brought together \
several existing ideas into a working system. Printing from carved wooden blocks was already \
known, and in East Asia movable type had been used centuries earlier, first in China and later, \
with metal type, in Korea. Gutenberg's contribution in Europe was the combination of \
individual metal letters cast in a hand mould, an oil-based ink that stuck to metal, and a \
press adapted from the screw presses used for making wine and paper. The letters could be \
arranged into pages, printed hundreds of times, and then taken apart and reused.

The effect was not immediate everywhere, but it was fast by the standards of the time. By 1500, \
printing shops were working in more than two hundred European towns, and historians estimate \
that several million books had been printed. Prices fell sharply. A merchant or a schoolteacher \
could now own a handful of books, and pamphlets costing no more than a loaf of bread carried \
news, sermons, arguments and advertisements across whole regions within weeks.

This spread of printed material had large consequences. Religious reformers in the early \
sixteenth century used cheap pamphlets to reach audiences far beyond their own pulpits, and \
their opponents answered in print as well. Scholars could compare identical copies of the same \
text, which made it easier to correct errors and to build on each other's work; some historians \
link this to the growth of modern science. Printed grammars and dictionaries helped to fix the \
spelling of languages such as English, French and German, while printers, who wanted to sell as \
many copies as possible, increasingly published in these everyday languages rather than in \
Latin.

Not everyone welcomed the change. Some scribes lost their livelihoods, though many became \
printers or editors. Authorities worried about the spread of dangerous ideas and introduced \
licensing and censorship, requiring printers to obtain permission before publishing. Others \
complained that there were now too many books of poor quality, a concern that sounds familiar \
in the age of the internet.

It would be wrong to say that printing alone caused the Reformation, the scientific revolution \
or the rise of mass literacy. Each had many causes, and literacy in particular grew slowly over \
several centuries, helped by schools, cheaper paper and later by steam-powered presses. But \
printing changed the conditions under which ideas travelled: it made texts cheaper, more \
numerous, more uniform and harder to suppress completely. In that sense it changed not only \
what people could read, but who could take part in a conversation that had previously belonged \
to a small, educated few."""

SALES_REPORT = """\
Kettle & Kiln - ceramics studio - Q3 sales report (July to September)

Channel revenue, in euros
| channel           | July  | August | September |
| online shop       | 6,420 | 5,180  | 7,960     |
| studio counter    | 3,150 | 4,870  | 2,640     |
| wholesale (cafés) | 2,800 | 2,800  | 4,200     |
| workshops         | 1,900 | 1,150  | 2,350     |

Notes from the owner
- August was slow online because the shop was closed for a week during the potters' holiday, \
but the tourist season brought more walk-in customers to the studio counter.
- In September a new café chain, Beanline, placed a wholesale order for 300 mugs at 14 euros \
each, delivered in two equal batches (the first in September, the second planned for \
October). The regular wholesale customers continued to order 2,800 euros a month in total.
- Workshops are priced at 50 euros per person. The August figure includes two refunds for a \
cancelled session.
- Costs: clay, glaze and firing come to about 31% of product revenue (online, counter and \
wholesale). Workshop materials cost 8 euros per participant. Rent is 1,600 euros a month and \
the part-time assistant costs 1,450 euros a month. Card payment fees are 1.5% of online and \
counter revenue.
- Target for Q3 was total revenue of 42,000 euros.

Best-selling products in Q3 (units, all channels)
| product                 | price | July | August | September |
| speckled mug            | 24    | 96   | 88     | 71        |
| small bowl              | 18    | 64   | 90     | 52        |
| serving platter         | 65    | 12   | 19     | 9         |
| bud vase                | 15    | 40   | 57     | 35        |

The mug figures above do not include the Beanline order. The remaining revenue came from \
seconds, one-off commissions and the online-only glaze sampler sets.

Goals for Q4
- Reach 15,000 euros revenue in December alone, helped by the holiday market.
- Launch a gift-card product online.
- Run at least four workshops a month, with a maximum of eight people each."""

PROMPTS = [
    (
        "code_explain",
        "Here is a small JavaScript module from our dashboard. Explain it to a new team member "
        "who knows basic JavaScript but not this code. Cover: what each public method does; "
        "what the `replay` option and the `history` array are for; how wildcard listeners work; "
        "how errors in listeners, including rejected promises, are handled; and what the "
        "returned function from `on` is for. Then point out the most confusing line in `emit` "
        "and suggest a clearer way to write it. Do not rewrite the whole file.\n\n"
        "```js\n" + EVENT_BUS_JS + "```",
    ),
    (
        "rewrite",
        "Turn this chat log from our operations channel into a formal incident postmortem. Use "
        "the headings Summary, Impact, Timeline, Root cause, What went well, What went poorly, "
        "and Action items. Keep the timeline to at most eight entries, write in a blameless "
        "tone (name roles, not people), and give each action item an owner role and a "
        "priority. Do not invent facts that are not in the log.\n\n" + OUTAGE_CHAT,
    ),
    (
        "qa",
        PRINTING_ESSAY + "\n\n"
        "Based only on the essay above, answer the following. Quote a short phrase from the text "
        "for each answer.\n"
        "1. What three elements did Gutenberg combine, according to the essay?\n"
        "2. Did Gutenberg invent movable type? Explain the essay's position.\n"
        "3. Give two ways printing affected languages.\n"
        "4. Why does the author say printing did not alone cause mass literacy?\n"
        "5. Which complaint from the time does the author compare to the internet age?",
    ),
    (
        "math",
        "Use the report below to answer these questions. Show your working for each, and round "
        "money to whole euros.\n"
        "(a) What was the total revenue for each month and for the quarter? Did the studio meet "
        "its Q3 target, and by how much did it miss or beat it?\n"
        "(b) How much of September's wholesale revenue came from Beanline, and how much will "
        "Beanline's second batch add in October?\n"
        "(c) Estimate the profit for the quarter after product costs, workshop materials, rent, "
        "the assistant's pay and card fees.\n"
        "(d) If the August refunds were for 50 euros each, how many workshop places were sold in "
        "August?\n"
        "(e) If every Q4 workshop is full, what is the minimum monthly workshop revenue?\n"
        "(f) Which product brought in the most revenue over the quarter, and what share of the "
        "product revenue did the four best sellers make up together?\n\n"
        + SALES_REPORT,
    ),
]

LETTERS = """\
Harrow Point Lighthouse, 3 March

Dear Miss Okafor,

Thank you for your letter and for the seed packets, which arrived a little damp but otherwise \
whole. I confess I had never heard of a seed library before. You are right that nothing much \
grows out here on the point; the wind takes anything taller than a thistle. But there is a \
sheltered corner behind the oil store where the wall holds the warmth of the afternoon, and I \
have cleared it of stones. I will try the sea kale first, as you suggested, since it is said to \
like salt.

You asked what a keeper does all day now that the light is electric. Less than my grandfather \
did, and more than the Board believes. I wipe the lens, log the weather every three hours, and \
walk the path to check the fog signal. In winter I mostly listen: to the radio, to the \
shipping forecast, to the sea deciding what kind of day it will be.

Yours sincerely,
Edmund Pryce

---

Corran Street Library, 19 March

Dear Mr. Pryce,

I laughed at 'the sea deciding what kind of day it will be' and read it aloud to the children \
at Tuesday's story hour. One of them, a boy called Femi who rarely speaks, asked whether the \
lighthouse keeper was lonely. I told him I would ask you, so I am asking.

Our seed library has grown to sixty members. People bring back seeds from what they grew and \
label them with little stories: 'from my mother's garden in Lagos', 'the beans that survived \
the slugs'. I am enclosing a packet of the slug-proof beans. They may be the only thing tough \
enough for Harrow Point.

With best wishes,
Adaeze Okafor

---

Harrow Point Lighthouse, 2 April

Dear Miss Okafor,

Please tell Femi that I am alone, which is not quite the same as lonely. The gannets are poor \
conversationalists but reliable company, and the lighthouse has a way of making you feel \
useful even at three in the morning. That said, I have read your letters more times than I \
would admit to the Board.

The sea kale has come up: four grey-green leaves, stubborn as anything. The beans are in. I \
have labelled them 'from a library in the city, planted on a rock at the edge of the map'.

There is news I have been putting off writing. The Board has decided to automate Harrow Point \
fully by the end of the summer. The light will be watched from a screen two hundred miles \
away. I am to be offered a post at a depot inland, sorting spare parts.

Yours,
Edmund"""

WEATHER_API = """\
Breezy Weather API, version 2 - reference (excerpt)

Base URL: https://api.breezy.example/v2
All requests need the header `X-Api-Key: <your key>`. Responses are JSON encoded in UTF-8. \
Times are ISO 8601 in UTC unless `tz` is given.

GET /current
Query parameters:
- lat (required, float, -90 to 90)
- lon (required, float, -180 to 180)
- units (optional: "metric" default, or "imperial")
Response 200:
{ "time": "2024-06-01T12:00:00Z", "temp": 21.4, "feels_like": 20.9, "humidity": 0.55,
  "wind": { "speed": 4.2, "gust": 7.9, "dir_deg": 250 }, "condition": "partly_cloudy" }

GET /forecast/hourly
Query parameters: lat, lon, units as above, plus
- hours (optional, int, 1 to 72, default 24)
- tz (optional, IANA name such as "Europe/Paris"; times are then local with offset)
Response 200:
{ "lat": 48.85, "lon": 2.35, "tz": "UTC",
  "hours": [ { "time": "...", "temp": 18.0, "precip_mm": 0.2, "precip_prob": 0.35,
               "condition": "light_rain" }, ... ] }

Errors
- 400 {"error": "bad_request", "detail": "..."} for invalid parameters
- 401 {"error": "unauthorized"} when the key is missing or wrong
- 429 {"error": "rate_limited", "retry_after": 12} when you exceed 60 requests per minute; \
the same number of seconds is also sent in the `Retry-After` header
- 503 {"error": "unavailable"} during maintenance; retrying after a short delay is safe

Conditions: clear, partly_cloudy, cloudy, fog, drizzle, light_rain, rain, heavy_rain, snow, \
sleet, thunderstorm.

Notes
- Coordinates are rounded to two decimal places on the server; requests that differ only \
beyond that precision return the same cached result for up to ten minutes.
- Hourly forecasts beyond 48 hours have lower accuracy and may return `null` for \
`precip_prob`."""

BEEKEEPER_INTERVIEW = """\
Interviewer: How did you start keeping bees?

Rosa Delgado: By accident, really. Eight years ago a swarm landed in the plum tree in my \
garden. I called a local beekeeper, an old man named Harold, expecting him to take them away. \
Instead he brought a spare hive, showed me how to shake the swarm into it, and said, 'Now \
they're yours.' I spent that first summer terrified and completely fascinated.

Interviewer: What surprised you most?

Rosa: How quiet a healthy hive is when you handle it calmly. People imagine angry buzzing, \
but if you move slowly and open the hive on a warm, sunny afternoon when most foragers are out, \
it's more like a low hum. The other surprise was how much of the work is just watching. You \
learn to read the entrance: pollen coming in on their legs means the queen is laying and there \
are young to feed; lots of bees hanging around in the evening might mean it's getting crowded.

Interviewer: How many hives do you have now?

Rosa: Eleven, spread over three sites: my garden, a community orchard and the roof of a \
school. The school hive has a glass observation panel, so the children can watch the comb \
being built. Every spring they name the queen. This year she's called Thunder.

Interviewer: Is beekeeping good for the environment?

Rosa: That's a more complicated question than people expect. Honeybees are domesticated \
animals, a bit like chickens. Keeping them doesn't help the hundreds of wild bee species, and \
in places with too many hives, honeybees can compete with wild bees for flowers. If someone \
wants to help bees in general, I usually tell them to plant flowers that bloom at different \
times of year, leave a patch of lawn unmown, and avoid pesticides. Keeping a hive is \
wonderful, but it's a hobby, not a conservation project.

Interviewer: What are the biggest threats to your bees?

Rosa: The varroa mite, without question. It's a parasite that feeds on the bees and spreads \
viruses. Every beekeeper here has to monitor for it and treat when the numbers get too high. \
Then there's the weather. Two years ago we had a wet, cold June, the bees couldn't fly, and \
I had to feed three colonies sugar syrup in midsummer, which is almost unheard of. And lately \
there's the Asian hornet, which hunts bees at the hive entrance. We've set up a volunteer \
network to report sightings.

Interviewer: How much honey do you get?

Rosa: It varies enormously. In a good year, maybe twenty to twenty-five kilos per hive; in a \
bad year, almost nothing, because I always leave the bees enough for winter. The orchard honey \
is light and floral, the garden honey darker because of the lime trees in our street. I sell \
some at the Saturday market, but mostly I give it away.

Interviewer: Any advice for someone thinking of starting?

Rosa: Join a local association and take a course before you buy anything. Find a mentor, the \
way I had Harold. Go and open a hive with someone experienced, to find out whether you can \
stay calm with thirty thousand bees around you. And be honest about time: in May and June, \
when colonies want to swarm, you need to check them every week."""

PROMPTS += [
    (
        "creative",
        "The letters below are the beginning of a short epistolary story. Write the next two "
        "letters: first Adaeze's reply to Edmund's news, then Edmund's answer, written in "
        "August on his last week at the lighthouse. Keep each character's voice consistent "
        "with what you read (Edmund dry and understated, Adaeze warm and practical), bring back "
        "at least two details from the earlier letters, and end with a hopeful turn that does "
        "not involve a romance. Each letter should be 150 to 220 words.\n\n" + LETTERS,
    ),
    (
        "code",
        "Using only the API reference below, write a Python module `breezy.py` with a class "
        "`BreezyClient`. Requirements: use the `requests` library; the API key is passed to "
        "the constructor; methods `current(lat, lon, units='metric')` and "
        "`hourly(lat, lon, hours=24, tz=None, units='metric')` return parsed dictionaries; "
        "validate latitude, longitude and hours locally before sending; on 429 wait for the "
        "number of seconds in Retry-After and retry, at most three times; on 503 retry with "
        "exponential backoff starting at one second; raise a custom `BreezyError` with the "
        "status code and detail for everything else. Add a helper `will_it_rain(lat, lon, "
        "hours=6, threshold=0.5)` that returns True if any hour's precipitation probability is "
        "at least the threshold, treating null as unknown rather than zero. Include docstrings "
        "and a short usage example.\n\n" + WEATHER_API,
    ),
    (
        "summarize",
        "Write a 200-word magazine profile of the beekeeper from the interview below. Use the "
        "third person, open with a vivid detail from the interview rather than with her name, "
        "include one direct quote, and make sure the piece reflects her nuanced view of whether "
        "beekeeping helps the environment. Finish with a one-sentence practical tip for readers."
        "\n\n" + BEEKEEPER_INTERVIEW,
    ),
]

BOARD_GAME_RULES = """\
Rules of SALT ROAD (a trading game for 2 to 4 players)

Components. A board showing seven towns connected by roads: Ashford, Brill, Cray, Dunmore, \
Elling, Fallow and Gant. Each player has a caravan token, 10 silver coins to start, and a \
cargo card with room for four goods. Goods are salt, wool, and spice. There is a market track \
for each good showing its price in each town.

Map. The roads are: Ashford-Brill, Ashford-Cray, Brill-Dunmore, Cray-Dunmore, Cray-Elling, \
Dunmore-Fallow, Elling-Fallow, Fallow-Gant. Every road takes one turn to travel, except \
Cray-Elling, which crosses the marsh and takes two turns. Roads can be travelled in both \
directions.

Prices. At the start, salt costs 1 silver in Ashford and Brill, 3 in Cray and Dunmore, and 5 in \
Elling, Fallow and Gant. Wool costs 2 everywhere except Gant, where it costs 4. Spice can only \
be bought in Gant, for 6 silver, and sells for 9 in Ashford and 8 in Brill. A town buys goods \
from players at the same price it sells them for.

A turn. On your turn you either move along one road (or continue a two-turn journey) or trade \
in the town where your caravan stands. Trading means any number of purchases and sales of \
goods, within your cargo space and your silver. You may not move and trade in the same turn.

Market changes. Whenever a player sells two or more units of the same good in one town in a \
single turn, that good's price in that town drops by 1 permanently, after the sale is \
completed. Prices can never fall below 1.

Tolls. Entering Dunmore costs a toll of 1 silver, paid when you arrive. Players with no silver \
may not enter Dunmore.

Winning. The game lasts 12 rounds; each round, every player takes one turn, starting with the \
youngest player. The player with the most silver at the end wins. Goods still on a cargo card \
at the end are worth nothing. Ties are broken by who reached Gant first during the game; if \
nobody reached Gant, the tied players share the win.

Variant for two players. In a two-player game, remove Elling from the board together with its \
roads. The marsh road no longer exists."""

GERMAN_REPORT = """\
Jahresbericht 2023 der Bäckereigenossenschaft „Korn & Kruste“

Liebe Mitglieder,

das vergangene Jahr war für unsere Genossenschaft ein Jahr der Bewährung. Als wir im Frühjahr \
2021 mit 84 Mitgliedern und einem gemieteten Backofen in der ehemaligen Schlosserei an der \
Lindenstraße begonnen haben, wussten wir nicht, ob das Modell einer gemeinschaftlich \
getragenen Bäckerei in unserem Stadtteil funktionieren würde. Heute zählen wir 312 Mitglieder, \
beschäftigen sechs Bäckerinnen und Bäcker in Voll- und Teilzeit und verkaufen an fünf Tagen \
in der Woche Brot, Brötchen und Kuchen aus regionalem Getreide.

Die größte Herausforderung des Jahres waren die Energiepreise. Im Januar stiegen unsere \
Stromkosten gegenüber dem Vorjahr um fast siebzig Prozent. Der Vorstand hat daraufhin \
gemeinsam mit dem Backteam die Abläufe umgestellt: Der Ofen wird nun nur noch an vier statt an \
sechs Stunden pro Tag beheizt, und wir backen Sorten mit ähnlicher Temperatur direkt \
hintereinander. Außerdem haben wir im Sommer mit finanzieller Unterstützung der Stadt eine \
Wärmerückgewinnung eingebaut, die das Wasser für die Spülküche erwärmt. Dadurch konnten wir den \
Energieverbrauch um rund ein Viertel senken.

Trotz gestiegener Kosten haben wir die Preise nur einmal, im März, um durchschnittlich acht \
Prozent erhöht. Möglich war das, weil viele Mitglieder bereit waren, ihren Jahresbeitrag \
freiwillig aufzustocken, und weil der Verkauf an zwei Kindertagesstätten und ein Altenheim \
unseren Absatz stabilisiert hat. Der Umsatz stieg insgesamt auf 486.000 Euro, der \
Jahresüberschuss beträgt bescheidene 7.300 Euro, die wir vollständig in die Rücklage einstellen \
möchten.

Erfreulich ist auch die Entwicklung unserer Ausbildung. Zum ersten Mal bilden wir zwei junge \
Menschen zu Bäckern aus, und unsere offene Backstube am Samstagvormittag, in der Kinder und \
Erwachsene unter Anleitung eigene Brote formen, war fast immer ausgebucht.

Für 2024 schlägt der Vorstand drei Schwerpunkte vor: erstens die Anschaffung eines zweiten, \
kleineren Ofens für Feingebäck, um den großen Ofen seltener anheizen zu müssen; zweitens einen \
Lieferdienst mit Lastenrädern für ältere Menschen im Viertel; drittens die Verlängerung des \
Mietvertrags für die Backstube, der Ende 2025 ausläuft. Über diese Vorschläge stimmen wir auf \
der Mitgliederversammlung am 20. April ab.

Mit herzlichen Grüßen
Der Vorstand"""

PROMPTS += [
    (
        "reasoning",
        "Read the rules of this board game carefully, then answer the questions. Explain each "
        "answer with reference to the rules, and state any rule that is ambiguous.\n\n"
        + BOARD_GAME_RULES
        + "\n\n"
        "Questions:\n"
        "1. What is the fewest number of turns needed to travel from Ashford to Gant in a "
        "four-player game? Give the route. What about in a two-player game?\n"
        "2. A player in Ashford with 10 silver buys four salt. What is the best price at which "
        "they can sell it, and how many turns does it take to get there?\n"
        "3. A player sells two salt in Elling in one turn, and then another player sells one "
        "salt there next turn. What price does each player receive per salt?\n"
        "4. Is it ever worth buying spice? Compare one round trip from Brill to Gant and back "
        "with a salt route, counting turns.\n"
        "5. A player with 0 silver stands in Brill holding two wool. Can they reach Fallow? "
        "Explain.",
    ),
    (
        "translate",
        "Translate the following annual report of a German bakery cooperative into clear "
        "English for an international partner organisation. Keep the structure (greeting, "
        "paragraphs, sign-off), convert no numbers, and render the cooperative's name as "
        "'Grain & Crust' with the German name in brackets the first time. After the "
        "translation, add a three-line summary of the proposals for 2024.\n\n" + GERMAN_REPORT,
    ),
]

PRD = """\
Product requirements: "Pickup lockers" for the Greenleaf grocery app
Owner: Fatima Zahra (product). Reviewers: engineering, operations, legal. Status: draft 3.

Problem
Home delivery slots on weekday evenings sell out days in advance, and 18% of delivered orders \
need a second attempt because nobody is home. Many customers pass one of our stores on the way \
home but do not want to wait at a counter. We want to let customers collect orders from \
refrigerated lockers at selected stores at any time of day.

Goals
- G1: Offer locker pickup at 12 stores within three months of launch.
- G2: Reduce failed first-attempt deliveries from 18% to below 12% in areas with lockers.
- G3: Keep the cost per locker order below the cost of a home delivery (currently 6.40 EUR).

Non-goals
- Lockers at non-store locations such as train stations (maybe later).
- Alcohol and tobacco orders: they require an age check at handover and are excluded.

Functional requirements
- FR1 (must): At checkout, customers choose a store with lockers and a pickup window of 2 hours, \
at least 3 hours after ordering.
- FR2 (must): When the order is loaded, the customer receives a push notification and an email \
containing a six-digit code and a QR code.
- FR3 (must): The locker keeps three temperature zones: ambient, chilled (2 to 5 degrees) and \
frozen (minus 18 degrees or colder). An order may use compartments in several zones.
- FR4 (must): If an order is not collected within 24 hours after the end of the window, staff \
remove it; chilled and frozen goods are discarded and the customer is refunded minus a 5 EUR \
fee.
- FR5 (should): Customers can extend the window once by up to 12 hours in the app, if the \
compartment is not needed by another order.
- FR6 (should): Staff see a dashboard of compartments that are loaded, empty, faulty or overdue.
- FR7 (could): Customers can return empty reusable bags into a separate compartment.

Non-functional requirements
- NFR1: Locker codes must expire when the order is collected or removed, and may not be \
reused for 90 days.
- NFR2: The locker must keep working offline for up to 4 hours, syncing events when the \
connection returns.
- NFR3: Temperature is logged every 5 minutes; an alert goes to store staff if a chilled \
compartment is above 7 degrees for more than 15 minutes.
- NFR4: The app screens must meet accessibility level AA, and the locker touchscreen must be \
usable from a wheelchair.

Open questions
- Q1: Do we charge a fee for locker pickup, or is it free above a minimum order value?
- Q2: Who is liable if a locker fault spoils frozen goods before pickup: us or the vendor?
- Q3: Can two orders from the same household share a compartment?

Milestones
- Pilot in 2 stores: start of May.
- Decision to roll out: end of June, based on pilot metrics.
- 12 stores: end of August."""

SURVEY = """\
1. "The new opening hours are great, I can finally shop after my late shift."
2. "Self-checkout keeps asking for staff approval when I buy fruit. So slow."
3. "Please bring back the fresh fish counter, the packaged fish isn't the same."
4. "Staff at the bakery section are always friendly, especially the young man with glasses."
5. "Prices went up again. I now do half my shopping at the discounter next door."
6. "Car park is full every Saturday and the trolleys are always missing."
7. "Love the new vegan section! Could you label allergens more clearly though?"
8. "I waited 20 minutes at the pharmacy counter with only one person serving."
9. "The app coupons don't work at the self-checkout, only at normal tills."
10. "Why are there so many plastic bags for vegetables? Paper would be better."
11. "Nice to see local honey and cheese from farms nearby."
12. "The music is too loud. I have a hearing aid and it's really unpleasant."
13. "Online order arrived with two items missing and no refund yet after a week."
14. "Good that you added more benches at the entrance for older people."
15. "Self-checkout scale is broken half the time, very frustrating."
16. "Cheaper own-brand products are decent quality, I switched most of my shopping."
17. "Fresh bread runs out by 5 pm, too early for people who work."
18. "Cashier Petra helped me carry my shopping to the car, so kind."
19. "The store is cold in winter near the freezers, I don't like to linger."
20. "I would like a click-and-collect option so I don't have to come in at all."
21. "Loyalty points expire too fast, I lost 400 points last month."
22. "Floors are clean, shelves well stocked. Best supermarket in the area."
23. "Bike racks are always full, and two are broken."
24. "The reduced-price corner for food near its date is a great idea, less waste."
25. "Queues on Sunday mornings are ridiculous, open more tills when it's busy."
26. "Please stock gluten-free pasta again, it disappeared three weeks ago."
27. "Entrance ramp is steep and slippery when it rains, dangerous with a walker."
28. "Why does the app log me out every time I open it? Very annoying."
29. "The deli staff gave my son a slice of cheese to try, he was delighted."
30. "Opening at 6 am on Saturdays would help those of us who work weekends."
"""

PROMPTS += [
    (
        "extract",
        "Read this product requirements document and produce a JSON object with these keys:\n"
        "- 'goals': array of {id, text, metric, target}\n"
        "- 'requirements': array of {id, priority (must/should/could, or null for non-functional), "
        "kind (functional or non_functional), summary (at most 12 words)}\n"
        "- 'exclusions': array of strings\n"
        "- 'open_questions': array of {id, question, suggested_owner}, where suggested_owner is "
        "the reviewer group (engineering, operations or legal) best placed to answer it\n"
        "- 'milestones': array of {name, when}\n"
        "Output only valid JSON.\n\n" + PRD,
    ),
    (
        "classify",
        "These are free-text answers from a supermarket customer survey. Classify every comment "
        "into one main theme from this list: checkout, prices, product_range, staff, "
        "store_environment, parking_and_access, online_services, opening_hours, "
        "sustainability. Also tag each with sentiment: positive, negative or suggestion. Output "
        "a markdown table with the columns #, theme, sentiment. After the table, give a "
        "count per theme, name the two themes that most need management attention and explain "
        "why in two sentences.\n\n" + SURVEY.strip(),
    ),
]
