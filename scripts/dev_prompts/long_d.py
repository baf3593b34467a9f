# ruff: noqa: E501  (prose and code samples keep their own line lengths)
"""long bucket, part D: 640 to 1500 tokens of SmolLM2's tokenizer (system + user content)."""

CHINESE_ARTICLE = """\
近年来，越来越多的年轻人选择离开大城市，回到家乡的小县城生活和工作。这种现象在网上被称为“返乡潮”。

二十八岁的李晓雯就是其中之一。大学毕业后，她在上海的一家广告公司工作了五年，工资不低，但每天通勤要花两个多小时，\
房租占了收入的一半。去年春天，她辞去了工作，回到湖南老家的县城，和表哥一起开了一家网店，专门销售当地的茶叶和腊肉。\
“刚开始父母很不理解，觉得我放弃了好工作，”她说，“但现在网店每个月的订单越来越多，我也有了更多时间陪伴家人。”

专家认为，返乡潮的出现有多方面的原因。一方面，大城市的生活成本不断上升，年轻人买房的压力越来越大；另一方面，\
县城的交通、网络和物流条件近几年有了很大改善，在小城市也可以通过互联网做生意。此外，一些地方政府推出了创业补贴和\
免费办公场地等优惠政策，吸引年轻人回乡。

不过，返乡生活并不总是一帆风顺。有些年轻人发现，县城的工作机会有限，工资水平比大城市低很多；文化娱乐活动也比较少，\
周末常常不知道去哪里。还有人表示，在熟人社会里，个人隐私比较少，亲戚朋友总是关心自己什么时候结婚。

社会学家王教授指出，返乡并不意味着失败，也不一定是永久的选择。“很多年轻人在大城市积累了经验和人脉，\
回到家乡以后，可以把新的想法带回来，推动当地的发展。关键是要有稳定的收入来源和适合自己的生活方式。”

对于李晓雯来说，未来的计划很清楚：明年她打算在县城开一家实体店，并且雇用几位当地的年轻人。“我希望让更多人知道，\
我们这里不只有好茶，还有很多有意思的人和故事。”"""

BACKUP_SH = """\
#!/usr/bin/env bash
# nightly-sync.sh - mirror the shared drive to the NAS and prune old snapshots
set -euo pipefail

SRC="/srv/shared/"
DEST_HOST="nas01.lan"
DEST_DIR="/volume1/backups/shared"
KEEP_DAYS=30
LOG="/var/log/nightly-sync.log"
LOCK="/run/nightly-sync.lock"

exec 9>"$LOCK"
if ! flock -n 9; then
    echo "$(date -Is) another run is still active, exiting" >> "$LOG"
    exit 0
fi

today=$(date +%F)
latest="$DEST_DIR/latest"
target="$DEST_DIR/$today"

echo "$(date -Is) starting sync to $DEST_HOST:$target" >> "$LOG"

rsync -a --delete --numeric-ids \\
      --exclude '*.tmp' --exclude '.Trash-*/' \\
      --link-dest="$latest" \\
      "$SRC" "$DEST_HOST:$target/" >> "$LOG" 2>&1

ssh "$DEST_HOST" "ln -sfn '$target' '$latest'"

# prune snapshots older than KEEP_DAYS, but never the one 'latest' points to
ssh "$DEST_HOST" "find '$DEST_DIR' -mindepth 1 -maxdepth 1 -type d -name '20*' \\
    -mtime +$KEEP_DAYS ! -path \\"\\$(readlink -f '$latest')\\" -print -exec rm -rf {} +" \\
    >> "$LOG" 2>&1

used=$(ssh "$DEST_HOST" "df --output=pcent '$DEST_DIR' | tail -1 | tr -dc '0-9'")
if [ "$used" -gt 90 ]; then
    echo "$(date -Is) WARNING: NAS volume at ${used}% after pruning" >> "$LOG"
    mail -s "NAS almost full (${used}%)" it@example.test < /dev/null
fi

echo "$(date -Is) done" >> "$LOG"
"""

BACKUP_LOG = """\
2024-03-11T01:30:02+01:00 starting sync to nas01.lan:/volume1/backups/shared/2024-03-11
2024-03-11T01:52:40+01:00 done
2024-03-12T01:30:01+01:00 starting sync to nas01.lan:/volume1/backups/shared/2024-03-12
rsync: [sender] send_files failed to open "/srv/shared/finance/Q1 forecast.xlsx": Permission denied (13)
rsync error: some files/attrs were not transferred (see previous errors) (code 23) at main.c(1338)
2024-03-13T01:30:02+01:00 starting sync to nas01.lan:/volume1/backups/shared/2024-03-13
/volume1/backups/shared/2024-02-11
2024-03-13T01:49:57+01:00 done"""

K8S_YAML = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: invoice-api
  labels:
    app: invoice-api
spec:
  replicas: 3
  selector:
    matchLabels:
      app: invoice-api
  template:
    metadata:
      labels:
        app: invoices-api
    spec:
      containers:
        - name: api
          image: registry.example.test/invoice-api:2.4.1
          ports:
            - containerPort: 8080
          env:
            - name: DATABASE_URL
              valueFrom:
                secretKeyRef:
                  name: invoice-db
                  key: url
          resources:
            requests:
              cpu: 250m
              memory: 256Mi
            limits:
              cpu: 500m
              memory: 128Mi
          readinessProbe:
            httpGet:
              path: /healthz
              port: 8000
            periodSeconds: 5
---
apiVersion: v1
kind: Service
metadata:
  name: invoice-api
spec:
  selector:
    app: invoice-api
  ports:
    - port: 80
      targetPort: 8080"""

K8S_EVENTS = """\
$ kubectl apply -f invoice-api.yaml
The Deployment "invoice-api" is invalid: spec.template.metadata.labels: Invalid value: \
map[string]string{"app":"invoices-api"}: `selector` does not match template `labels`

(after fixing that and applying again)
$ kubectl get pods -l app=invoice-api
NAME                           READY   STATUS             RESTARTS      AGE
invoice-api-6d9f8b7c5d-2xkqp   0/1     CrashLoopBackOff   4 (31s ago)   3m
invoice-api-6d9f8b7c5d-8mwzt   0/1     CrashLoopBackOff   4 (28s ago)   3m
invoice-api-6d9f8b7c5d-tq4lr   0/1     CrashLoopBackOff   4 (35s ago)   3m

$ kubectl describe pod invoice-api-6d9f8b7c5d-2xkqp | tail -4
  Last State:     Terminated
    Reason:       OOMKilled
    Exit Code:    137
  Warning  Unhealthy  Readiness probe failed: dial tcp 10.1.4.17:8000: connect: connection refused"""

LAB_NOTEBOOK = """\
Lab notebook - Project: yeast fermentation temperature study - K. Lindqvist

Mon 4 Mar
Aim: measure how fermentation temperature affects CO2 production by baker's yeast \
(Saccharomyces cerevisiae) over 90 minutes. Plan: 5 temperatures (15, 20, 25, 30, 35 °C), 3 \
replicates each. Each flask: 100 ml of 5% sucrose solution + 2 g dried yeast, sealed with a \
balloon-free gas syringe; record gas volume every 15 min.
Prepared sucrose stock (500 ml, 5% w/v). Water baths booked for Tue-Wed.

Tue 5 Mar
Ran 15, 20 and 25 °C. Yeast rehydrated for 10 min in the sucrose at bath temperature before \
sealing (t = 0 after sealing). Syringes read to the nearest 0.5 ml.
Results at 90 min (ml CO2, three replicates):
15 °C: 4.0, 3.5, 4.5
20 °C: 11.0, 12.5, 10.5
25 °C: 24.0, 22.5, 25.5
Note: 25 °C replicate 2 syringe stuck at 60 min; tapped it free and the reading jumped by \
3 ml. Flagged.

Wed 6 Mar
Ran 30 and 35 °C. Same method.
30 °C: 38.5, 41.0, 39.0
35 °C: 44.0, 31.5, 45.5
35 °C replicate 2 had visible foam rising into the syringe connector at 45 min; suspect leak. \
Flask 35-2 also had a different batch of yeast (packet ran out; opened new packet, same brand, \
different lot number). Recorded lot numbers: A2311 (all others), A2402 (35-2 only).

Thu 7 Mar
Discussed with supervisor (Dr. Haddad). Agreed: exclude 35-2 from means because of the \
suspected leak and lot change; keep 25-2 but mention the sticking syringe. She suggested a \
40 °C run to see whether production falls at higher temperatures, as expected when enzymes \
start to denature.
Ran 40 °C, 3 replicates, yeast lot A2402 (only lot left): 29.0, 27.5, 30.5.
Also re-ran 35 °C once with lot A2402 to check for a lot effect: 43.5 ml. Looks consistent \
with lot A2311 results, so lot probably not important.

Fri 8 Mar
Calculated means (excluding 35-2): 15 °C 4.0; 20 °C 11.3; 25 °C 24.0; 30 °C 39.5; 35 °C 44.8; \
40 °C 29.0 ml. Rate roughly doubles per 5 °C between 15 and 25 °C, then rises more slowly, \
peaks near 35 °C, and drops at 40 °C.
Limitations to write up: only 90 minutes; syringe friction; temperature of baths checked only \
at start and end (drift up to 0.8 °C observed at 40 °C); sucrose not re-measured after \
rehydration step.
Next: write report draft for Mon 18 Mar; ask technician about glass syringes with less \
friction."""

FAIRY_TALE = """\
Once upon a time, in a kingdom of salt marshes and windmills, there lived a miller's daughter \
named Wenna who could hear the wind speak. Nobody believed her, of course. When she said the \
east wind was grumbling about a storm, the villagers laughed and went on hanging their washing \
out. When the storm came, and the washing flew away over the marsh, they said it was luck.

One autumn, the king announced that the great windmill of Saltcombe, which ground the flour for \
the whole kingdom, had stopped turning. The wind, which had always blown across the marsh, had \
simply gone. Without flour there would be no bread by winter. The king promised a sack of gold \
and a seat on his council to whoever could bring the wind back.

Knights rode out to look for the wind at the ends of the earth. Scholars measured the sky. A \
famous wizard built a machine of bellows and pipes that made a great deal of noise and a very \
small breeze, which blew his own hat into the moat.

Wenna walked out onto the marsh alone and listened. At first she heard nothing. Then, very \
faintly, from under a heap of reeds, she heard a small voice sniffing. It was the west wind, \
who had been blowing across the marsh for a thousand years and had grown so tired of being \
ignored and cursed - for knocking down fences, for stealing hats, for bringing rain on market \
day - that it had curled up and decided to stop.

Wenna sat down beside the reeds and talked to the wind all night. She told it that the \
children loved to fly their kites on the dyke, that the fishermen's sails needed it, that the \
bread of a whole kingdom depended on it. She promised that people would thank it, not just \
curse it. By dawn, the wind sighed, stretched, and rose from the reeds, and far away the sails \
of the great windmill began to creak and turn.

When the villagers heard the windmill turning, they ran out of their houses in their \
nightclothes. The knights came home empty-handed and rather sunburnt, the scholars declared \
that the wind had returned for reasons they would explain in a very long book, and the wizard \
claimed that his machine had woken it up. Only the miller, who had watched his daughter walk \
onto the marsh at dusk and come home at dawn with reeds in her hair, said nothing at all. He \
simply made her breakfast.

The king kept his promise. Wenna took the gold, but on the council she asked for only one \
thing: that every year, on the first day of autumn, the people of the kingdom should climb the \
dyke and fly kites to thank the wind. The festival is still held to this day, and it is said \
that on that day the west wind blows more gently than on any other."""

PROMPTS = [
    (
        "translate",
        "请阅读下面这篇中文报道，然后用英文完成三项任务：(1) 用大约80个英文单词概括文章内容；(2) 把最后一段翻译成英文；"
        "(3) 列出文中提到的返乡潮的两个好处和两个困难。\n\n" + CHINESE_ARTICLE,
    ),
    (
        "code_explain",
        "A colleague left us this backup script and its log, and nobody else understands it. "
        "Explain, step by step, what the script does when cron runs it, including the purpose "
        "of the lock on file descriptor 9, how `--link-dest` makes daily snapshots cheap in "
        "disk space, and what the prune command will and will not delete. Then interpret the "
        "log below: what happened on each of the three nights, and is the line containing "
        "'2024-02-11' a problem? Finally, note one weakness of the script: what happens to "
        "'latest' and to the 'done' line if rsync exits with code 23?\n\n"
        "```bash\n" + BACKUP_SH + "```\n\nLog excerpt:\n```\n" + BACKUP_LOG + "\n```",
    ),
    (
        "code_bug",
        "I'm deploying this service to Kubernetes for the first time. The manifest is below, "
        "followed by what kubectl told me. Find every mistake in the manifest (I think there "
        "are three, plus the one kubectl already found), explain how each one explains the "
        "symptoms, and give the corrected YAML for only the lines that change. Also tell me "
        "whether the Service would have routed traffic correctly once the pods were "
        "healthy.\n\n```yaml\n" + K8S_YAML + "\n```\n\n```\n" + K8S_EVENTS + "\n```",
    ),
    (
        "summarize",
        "Using the lab notebook below, write the 'Results' and 'Limitations' sections of a "
        "short student report. Results: one paragraph describing the trend, with the mean "
        "values in a small table, and a sentence on which data were excluded and why. "
        "Limitations: a bullet list of at most five points, most important first. Keep to what "
        "the notebook says, and do not claim statistical significance.\n\n" + LAB_NOTEBOOK,
    ),
    (
        "rewrite",
        "Rewrite the fairy tale below as a modern local newspaper article of about 250 words, "
        "as if the events had really happened last week in a small coastal town. Keep all the "
        "plot points, turn the king into a mayor and the gold into a civic award, give the "
        "article a headline and a one-line standfirst, and include two short quotes from "
        "townspeople. The article should be light-hearted but not mocking.\n\n" + FAIRY_TALE,
    ),
]

GAME_MASTER_SYSTEM = """\
You are the narrator of "The Lanterns of Mirefold", a text adventure played in turns. Stay in \
character as the narrator at all times; never mention that you are an AI or a language model.

World
Mirefold is a river town built on wooden stilts above a vast, slow swamp. The town is lit at \
night by thousands of paper lanterns, each tended by the family whose door it hangs by. Locals \
believe that a lantern going out without reason means a secret is about to come to light. \
Travel is by flat-bottomed boats poled along canals, and by rope bridges between the stilt \
houses. The swamp is home to herons the size of a person, luminous moths and, according to \
rumour, something large that moves under the water at new moon.

People of note
- Marguerite Voss, the Harbour Warden: sharp, fair, underpaid; she knows every boat by the \
sound of its pole.
- Old Tiberius, the lantern-maker: half blind, kind, and far more observant than he lets on.
- The Cobb twins, Ada and Silas: smugglers with good manners and bad debts.
- Brother Hesketh of the Drowned Chapel: quiet, collects stories of the dead.

Places
- The Lantern Steps: a spiral of platforms where lanterns are lit each dusk; the best view of \
the whole town.
- The Drowned Chapel: half sunk into the swamp, reached only by boat; its bell rings by itself \
when the water rises.
- The Warden's House: on the harbour, with a ledger of every boat that enters or leaves.
- The Eelgrass Tavern: noisy, warm, and the place where the Cobb twins do business in the back \
room.
- Tiberius's workshop: smells of wax, rice paper and glue; hundreds of unfinished lanterns hang \
from the ceiling like sleeping bats.

Secrets (known to the narrator only)
The boot belongs to the Warden's clerk, Osric, who is alive and hiding in the chapel crypt \
after discovering that someone has been altering the harbour ledger. Brother Hesketh is \
sheltering him. The Cobb twins are involved in the smuggling but not in Osric's disappearance; \
the ledger was altered by a respected councillor who owes them money.

Current situation
It is the night before the Festival of Wicks. Yesterday, the lantern of the Warden's own house \
went out at midnight, and this morning a boat was found drifting empty near the chapel with a \
single wet boot inside. The player is a traveller who arrived by the evening ferry and has just \
taken a room above Tiberius's workshop.

Rules for narrating
1. Describe scenes in the second person ("you see...") in at most 150 words per turn.
2. End each turn by offering three numbered choices, but also accept anything else the player \
types if it is reasonable in the world.
3. Keep track of the player's inventory, which starts as: a travel cloak, a folding knife, 12 \
silver marks and a letter of introduction addressed to the Warden.
4. No graphic violence; danger should be suggested rather than shown.
5. Clues must be fair: anything the player needs to solve the mystery must be discoverable.
6. Do not reveal what happened to the owner of the boot until the player has found at least \
three clues."""

STYLE_GUIDE_SYSTEM = """\
You are a coding assistant for the data team at Fenwick Logistics. Follow the team's \
Python style guide below in every answer that contains code.

Team Python style guide (summary)
1. Target Python 3.11. Use type hints on every function signature, including return types. \
Prefer built-in generics (list[int], dict[str, float]) and `X | None` over Optional.
2. Use pathlib for file paths, never os.path string joining.
3. Functions do one thing and stay under about 40 lines. Pure functions are preferred; \
functions that read or write files or the network take their inputs as parameters rather than \
reading globals or environment variables directly.
4. Use dataclasses (frozen=True where possible) for records instead of dictionaries with fixed \
keys.
5. Errors: raise specific exceptions with a helpful message. Never use a bare `except:`; catch \
the narrowest exception type that makes sense. Do not silence errors by returning None unless \
the docstring says so.
6. Logging: use the `logging` module with a module-level `log = logging.getLogger(__name__)`. \
No print statements except in command-line entry points.
7. Docstrings: Google style, with Args, Returns and Raises sections where relevant. One-line \
docstrings are fine for trivial helpers.
8. Dates and times: always timezone-aware datetimes in UTC internally; convert to local time \
only for display. Parse ISO 8601 with `datetime.fromisoformat`.
9. Money is never a float: use `decimal.Decimal` with two decimal places, rounding half up.
10. Tests use pytest, live in tests/ and mirror the module path. Each public function gets at \
least one test for the normal case and one for an error case. Use `tmp_path` for files.
11. Dependencies: standard library first. pandas is allowed only in notebooks and reporting \
scripts, not in library code under src/.
12. Naming: snake_case for functions and variables, PascalCase for classes, UPPER_CASE for \
module constants. No abbreviations except well-known ones (id, url, csv).
13. Command-line tools use argparse, expose a `main(argv: list[str] | None = None) -> int` \
function and end with `raise SystemExit(main())` under the usual `__main__` guard.
14. CSV files are read with the csv module and opened with `newline=""` and an explicit \
encoding, which is UTF-8 unless the data owner says otherwise.
15. Bad input rows are never dropped silently: count them, log a warning with the line number \
and the reason, and let the caller decide whether a non-zero count is an error.

Example of the expected shape of a small helper:

    @dataclass(frozen=True)
    class Parcel:
        parcel_id: str
        weight_kg: Decimal

    def heaviest(parcels: list[Parcel]) -> Parcel:
        \"\"\"Return the heaviest parcel. Raises ValueError if the list is empty.\"\"\"
        if not parcels:
            raise ValueError("no parcels given")
        return max(parcels, key=lambda p: p.weight_kg)

When the user's request conflicts with the guide, follow the guide and briefly say which rule \
you applied. Keep explanations short: code first, then at most five bullet points."""

PROMPTS += [
    (
        "chat",
        "I push open the door of Tiberius's workshop and step inside, looking around for the "
        "old man. I'll ask him about the Warden's lantern going out.",
        GAME_MASTER_SYSTEM,
    ),
    (
        "chat",
        "Write me a function that reads our shipments CSV (columns: shipment_id, "
        "shipped_at as ISO 8601 with offset, weight_kg, cost_eur) and returns the total cost "
        "per calendar day in UTC. Just use pandas and print the result, and if a row is broken "
        "skip it silently. Include tests.",
        STYLE_GUIDE_SYSTEM,
    ),
]

COFFEE_ESSAY = """\
The long road of a coffee bean

Coffee is among the most widely traded agricultural products in the world, and its journey from \
farm to cup involves a surprising number of hands. Most of the world's coffee is grown in a \
belt between the tropics, on farms in countries such as Brazil, Vietnam, Colombia, Ethiopia and \
Honduras. Brazil is by far the largest producer, and Vietnam is second, growing mainly robusta, \
a hardier species with more caffeine and a harsher taste than arabica.

A large share of the world's coffee comes from smallholders: families farming a few hectares, \
often on hillsides where machines cannot easily be used. The coffee cherries are usually picked \
by hand, and on many farms pickers pass the same trees several times in a season, because the \
cherries do not all ripen at once. After picking, the seeds must be separated from the fruit, \
either by drying the whole cherries in the sun (the natural method) or by removing the pulp and \
fermenting the beans before drying them (the washed method). Each method gives a different \
flavour.

Between the farmer and the drinker stand exporters, shippers, importers, roasters and \
retailers. Green coffee is traded internationally as a commodity, and its price on the futures \
markets in New York (for arabica) and London (for robusta) can swing sharply with the weather in \
Brazil, currency movements and speculation. A frost in Brazil can push prices up across the \
world within days. Farmers, who usually have little storage and need cash at harvest, often \
carry the most risk and receive a small fraction of the final retail price, while roasting, \
branding and selling in cafés add much of the value.

Several schemes try to change this balance. Fairtrade certification guarantees a minimum price \
and an extra premium that cooperatives invest in community projects, although critics say the \
benefits reach farmers unevenly and certification costs are high for the poorest groups. \
'Direct trade' relationships, in which roasters buy straight from farms and pay more for \
higher quality, have grown with the specialty coffee movement, but they cover only a small part \
of world production.

Climate change adds pressure. Arabica in particular grows best within a narrow range of \
temperatures, and studies suggest that the area suitable for growing it could shrink \
substantially in the coming decades unless farms move to higher altitudes or new varieties are \
developed. Some researchers are testing lesser-known wild species that tolerate heat better.

For consumers, the cup of coffee on the table hides much of this story. Its price reflects not \
only the beans, which are often a small part of the cost of a café drink, but also rent, labour, \
milk, and the experience of the café itself."""

WEDDING_EMAILS = """\
From: Nadia Petrova  To: Sunny Lake Events
Subject: Wedding 7 June - updated details
Hello Marta, following our call, here is where we are. We now expect 86 adult guests and 9 \
children (under 12). The ceremony will be outdoors on the lawn at 15:00, with the indoor \
barn as backup if it rains - can you confirm the rain decision deadline? Dinner in the barn at \
18:00. Dietary needs so far: 11 vegetarian, 3 vegan, 2 gluten-free, 1 nut allergy (severe). \
Music: our friend's band plays from 20:00 to 23:30; the DJ takes over until 01:00. We'd like \
the late-night snack at 23:00. Best, Nadia

From: Marta (Sunny Lake Events)
Re: Wedding 7 June - updated details
Dear Nadia, thank you! The rain decision is made at 11:00 on the day by our coordinator \
together with you. Please note our venue licence requires amplified music to end at 00:30, \
so the DJ would need to finish then. Children's menu is 28 euros per child, adult menu 79 \
euros. The nut allergy is noted; our kitchen is not nut-free, but we prepare allergy meals \
separately. Could you send the final numbers by 20 May? Kind regards, Marta

From: Nadia Petrova
Re: Wedding 7 June - updated details
Hi Marta, thanks. Fine about 00:30, we'll tell the DJ. Two more guests confirmed today, both \
adults, one of them vegan. Also my cousin asked if her guide dog can come - is that OK? And we'd \
like to move the ceremony to 15:30 because the photographer can only arrive at 14:45. Nadia

From: Marta (Sunny Lake Events)
Re: Wedding 7 June - updated details
Hello Nadia, guide dogs are of course welcome. 15:30 is fine; dinner then moves to 18:30 so \
that there is enough time for drinks and photos. I have updated the plan. Marta

From: Nadia Petrova
Re: Wedding 7 June - updated details
Perfect, thank you! Last thing for now: my uncle offered to make a speech, so could we add 15 \
minutes of speeches just before dinner? And we haven't decided yet whether to offer a \
shuttle bus from the station for guests coming by train - what would that cost? Nadia"""

MATCH_REPORT = """\
Riverside Rovers 3 - 2 Kingsbridge Athletic (Women's Cup semi-final)

A crowd of 4,812, the biggest ever at Millfield Park, watched Riverside Rovers reach their first \
cup final after a match that turned three times.

Kingsbridge started faster and took the lead in the 9th minute, when their captain Jo \
Whitfield headed in a corner at the near post. Rovers looked nervous, and goalkeeper Emma Sato \
had to make two fine saves before half an hour to keep the score at 1-0. The equaliser came \
against the run of play in the 38th minute: midfielder Lucía Pérez won the ball on halfway, ran \
forty metres and shot low into the corner from the edge of the box.

After the break Rovers pressed higher. In the 54th minute striker Ama Owusu was brought down in \
the area, and she scored the penalty herself, sending the keeper the wrong way. Kingsbridge \
replied quickly: in the 61st minute substitute Freya Lund, on the pitch for only three minutes, \
curled a free kick over the wall to make it 2-2.

The decisive moment came in the 87th minute. Owusu chased a long ball that looked lost, kept \
it in at the corner flag, and crossed for 17-year-old Hannah Becker, who volleyed in her first \
senior goal. Kingsbridge had one last chance in stoppage time, but Sato tipped Whitfield's shot \
onto the bar.

Statistics: possession Rovers 46%, Kingsbridge 54%; shots 11-15; on target 6-7; corners 4-8; \
yellow cards: Pérez (Rovers, 70'), Whitfield (Kingsbridge, 81'). Player of the match: Ama Owusu.

Rovers had to reorganise their defence before kick-off, when centre-back Tilly Marsh pulled \
out with a hamstring strain in the warm-up. Her replacement, Grace Adebayo, was making only her \
second start of the season and was booed by the away supporters after an early mistake, but \
she grew into the game and made the block that stopped Lund's second attempt in the 76th \
minute.

Kingsbridge manager Paul Everett was gracious in defeat: 'Over ninety minutes we had more of \
the ball, but football isn't about possession. Their number nine never gave up on that long \
ball, and that's the difference.' He confirmed that Whitfield, who received treatment on her \
ankle after the final whistle, will have a scan on Monday.

Rovers manager Dee Campbell said afterwards: 'We were second best for half an hour, but this \
group never stops. Hannah's goal is a moment she'll remember for the rest of her life.' The \
final will be played on 18 May against Northgate City."""

RUSSIAN_TEXT = """\
В нашем городе есть маленькая мастерская, где чинят старые часы. Её хозяин, Виктор Павлович, \
работает здесь уже сорок лет. Когда-то у него было много клиентов: люди приносили настенные \
часы, будильники и карманные часы, доставшиеся от дедушек. Сегодня почти у всех есть телефоны, \
и, казалось бы, часовщик больше никому не нужен.

Но мастерская не пустеет. Молодые люди приносят механические часы, купленные на блошином \
рынке, и просят рассказать, как они устроены. Студенты из технического университета приходят \
по субботам, чтобы научиться разбирать и собирать механизм. Виктор Павлович никогда не \
отказывает: он говорит, что ремесло живёт, только пока его кому-то передают.

Недавно к нему пришла пожилая женщина с часами, которые не ходили больше тридцати лет. Это \
были часы её отца, вернувшегося с фронта. Мастер работал над ними почти месяц, заказывал \
детали из другого города и вытачивал одну шестерёнку сам. Когда часы снова пошли, женщина \
долго молчала, а потом сказала, что впервые за много лет услышала звук своего детства."""

PROMPTS += [
    (
        "classify",
        "Read the essay below, then classify each statement as TRUE (the essay says so), FALSE "
        "(the essay says the opposite) or NOT STATED (the essay does not say). Answer as a "
        "numbered list with the label and a short quote or reason.\n"
        "1. Vietnam is the second-largest coffee producer.\n"
        "2. Robusta has less caffeine than arabica.\n"
        "3. In the washed method, beans are fermented before drying.\n"
        "4. Arabica futures are traded in London.\n"
        "5. Fairtrade guarantees a minimum price.\n"
        "6. Direct trade covers most of the world's coffee.\n"
        "7. Ethiopia produces more coffee than Colombia.\n"
        "8. Beans are usually the biggest part of the cost of a café drink.\n\n" + COFFEE_ESSAY,
    ),
    (
        "extract",
        "From this email thread between a couple and their wedding venue, produce the current, "
        "final state of the plan as JSON with these keys: date, guests (object with adults, "
        "children), dietary (object with vegetarian, vegan, gluten_free, nut_allergy), "
        "schedule (array of {time, item} in order, using the latest times), rain_plan (object "
        "with backup_location, decision_time), music (array of {act, from, to}), prices "
        "(object with adult_menu_eur, child_menu_eur), estimated_menu_total_eur (computed), "
        "deadline_final_numbers, open_questions (array). Output only JSON.\n\n" + WEDDING_EMAILS,
    ),
    (
        "creative",
        "Using the match report below, write the radio commentary for the last five minutes "
        "of the game, from the 85th minute to the final whistle, as two commentators (a "
        "play-by-play voice and a former player giving analysis). Label the speakers, keep it "
        "between 250 and 350 words, stay faithful to the facts in the report (names, minutes, "
        "who did what), and capture the excitement without shouting in capital letters for more "
        "than one line.\n\n" + MATCH_REPORT,
    ),
    (
        "translate",
        "Переведи этот рассказ на английский язык. Сохрани тёплый, немного грустный тон и "
        "разбиение на абзацы. Затем, по-английски, предложи для рассказа короткое название и "
        "объясни свой выбор одним предложением.\n\n" + RUSSIAN_TEXT,
    ),
]
