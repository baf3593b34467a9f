# ruff: noqa: E501  (prose and code samples keep their own line lengths)
"""medium bucket, part A: 128 to 639 tokens of SmolLM2's tokenizer (system + user content)."""

PROMPTS = [
    # summarisation of passages written for this set
    (
        "summarize",
        "Summarise the passage below in three sentences for a busy manager.\n\n"
        "The city of Harlow Bay introduced a bike-share scheme in April with 400 bicycles spread "
        "across 35 docking stations. During the first three months, riders took about 61,000 trips, "
        "far above the 40,000 the council had planned for. Most trips were short, with a median "
        "length of 2.3 kilometres, and the busiest stations were near the railway station and the "
        "university. However, the scheme also ran into problems. Around 9% of bicycles needed "
        "repairs each week, mostly for flat tyres and broken baskets, and some stations on the hill "
        "district were empty for most of the day because riders went downhill in the morning but "
        "took the bus back up. The council is now testing electric bicycles on the hill routes and "
        "has hired two extra mechanics. A survey of 1,200 riders found that 78% would recommend the "
        "scheme, but many asked for more stations in the outer neighbourhoods.",
    ),
    (
        "summarize",
        "Here is a short article from a school newsletter. Write a two-sentence summary and then "
        "list the three dates parents need to remember.\n\n"
        "This term the science club built a weather station on the roof of the east building. "
        "Students measured temperature, rainfall and wind speed every morning before classes and "
        "published the numbers on the noticeboard. In October they noticed that the rain gauge read "
        "far less than the airport's official figures, and after a week of detective work they "
        "found that a gutter was blocking the gauge on windy days. The station will be shown at the "
        "open evening on 14 November. On 2 December, the club will present its results to the city "
        "environment office, and families are invited to attend. The club meets again after the "
        "winter break on 9 January and welcomes new members from any year group. No experience is "
        "needed, only curiosity and a willingness to get up a few minutes earlier.",
    ),
    (
        "summarize",
        "Condense this product update into a bullet list of at most five points.\n\n"
        "Version 3.2 of the Tallyho budgeting app is now available for phones and the web. The most "
        "requested feature, shared budgets, lets two or more people track the same set of accounts "
        "and categories, with each change marked by who made it. We rewrote the import tool, so bank "
        "statements in CSV and OFX formats now load about four times faster and duplicate "
        "transactions are detected automatically. Monthly reports can be exported as PDF. We "
        "removed the old desktop widget, which fewer than one percent of users opened last year, "
        "and we fixed a bug that sometimes showed the wrong currency symbol after travelling "
        "abroad. Finally, the app now supports a dark theme that follows the system setting. As "
        "always, your data stays encrypted on your device, and syncing remains optional.",
    ),
    (
        "summarize",
        "Fasse den folgenden Text in zwei Sätzen auf Deutsch zusammen.\n\n"
        "Die Gemeinde Altenbrück hat im vergangenen Jahr beschlossen, die Straßenbeleuchtung "
        "vollständig auf LED-Lampen umzustellen. Die Arbeiten begannen im März und sollen bis Ende "
        "des Sommers abgeschlossen sein. Nach Angaben des Bürgermeisters wird der Stromverbrauch "
        "dadurch um etwa sechzig Prozent sinken, was der Gemeinde jährlich rund 45.000 Euro spart. "
        "Einige Anwohner hatten sich zunächst über das kältere, hellere Licht beschwert. Daraufhin "
        "wurden in den Wohnstraßen Lampen mit wärmerer Lichtfarbe eingesetzt, die zudem nach "
        "Mitternacht automatisch gedimmt werden. Naturschützer begrüßen diese Lösung, weil sie "
        "nachtaktive Insekten weniger stört.",
    ),
    # find the bug
    (
        "code_bug",
        "I'm teaching an introductory programming class and one of my students submitted the "
        "function below. It should return the n-th Fibonacci number, with fib(0) = 0, fib(1) = 1 "
        "and fib(10) = 55, but the printed list does not match what the student expected, and "
        "fib(10) returns the wrong value. Please find the bug, explain it in words a beginner "
        "would follow (an off-by-one error is fine to name, but say where it comes from), show "
        "what the program prints now and what it should print, and give the fixed code. Finally, "
        "suggest one small test the student could have written to catch the mistake.\n\n"
        "```python\n"
        "def fib(n):\n"
        "    a, b = 0, 1\n"
        "    for _ in range(n - 1):\n"
        "        a, b = b, a + b\n"
        "    return a\n"
        "\n"
        "print([fib(i) for i in range(8)])\n"
        "```",
    ),
    (
        "code_bug",
        "Our small web shop has a strange bug: since last week's deploy, customers sometimes see "
        "another user's cart, and it seems to happen more after the server has been running for "
        "a while. Restarting the service makes it go away for a bit. Look at the code below and "
        "explain what is wrong, why the problem only appears after a restart plus some traffic, "
        "and how you would fix it. Mention whether a per-user cache is a good idea here at all, "
        "and what you would need to think about if the service ran on several servers.\n\n"
        "```python\n"
        "from flask import Flask, jsonify, request\n"
        "\n"
        "app = Flask(__name__)\n"
        "_cache = {}\n"
        "\n"
        "def load_cart(user_id):\n"
        "    if 'cart' not in _cache:\n"
        "        _cache['cart'] = db.fetch_cart(user_id)\n"
        "    return _cache['cart']\n"
        "\n"
        "@app.get('/cart')\n"
        "def cart():\n"
        "    user_id = request.headers['X-User']\n"
        "    return jsonify(load_cart(user_id))\n"
        "```",
    ),
    (
        "code_bug",
        "This C function is meant to copy a string into a newly allocated buffer, like the POSIX "
        "strdup. It seems to work in our tests, but valgrind reports 'Invalid write of size 1' "
        "every time it is called, and once in production the program crashed inside free() a "
        "long time after this function ran. What is the mistake, why does it not crash "
        "immediately, and why can the crash show up somewhere else entirely? Give the corrected "
        "function and mention one safer alternative from the C standard library or POSIX.\n\n"
        "```c\n"
        "#include <stdlib.h>\n"
        "#include <string.h>\n"
        "\n"
        "char *dup_string(const char *src) {\n"
        "    size_t n = strlen(src);\n"
        "    char *out = malloc(n);\n"
        "    if (out == NULL) {\n"
        "        return NULL;\n"
        "    }\n"
        "    strcpy(out, src);\n"
        "    return out;\n"
        "}\n"
        "```",
    ),
    (
        "code_bug",
        "A colleague wrote this Go program to practise goroutines: it should add the numbers 1 to "
        "1000 concurrently and print 500500. The total is different on every run, and sometimes "
        "it is correct, which confused them even more. Explain the problem, name the tool in the "
        "Go toolchain that would have detected it, and propose two ways to fix it: one using the "
        "sync package and one using a channel. Say which fix you would choose and why.\n\n"
        "```go\n"
        "package main\n"
        "\n"
        "import (\n"
        "    \"fmt\"\n"
        "    \"sync\"\n"
        ")\n"
        "\n"
        "func main() {\n"
        "    total := 0\n"
        "    var wg sync.WaitGroup\n"
        "    for i := 1; i <= 1000; i++ {\n"
        "        wg.Add(1)\n"
        "        go func(n int) {\n"
        "            defer wg.Done()\n"
        "            total += n\n"
        "        }(i)\n"
        "    }\n"
        "    wg.Wait()\n"
        "    fmt.Println(total)\n"
        "}\n"
        "```",
    ),
    # explain code
    (
        "code_explain",
        "Explain what this TypeScript function does, what it returns for the example, and one "
        "situation where it is useful.\n\n"
        "```ts\n"
        "function groupBy<T, K extends string>(items: T[], key: (item: T) => K): Record<K, T[]> {\n"
        "  return items.reduce((acc, item) => {\n"
        "    const k = key(item);\n"
        "    (acc[k] ||= []).push(item);\n"
        "    return acc;\n"
        "  }, {} as Record<K, T[]>);\n"
        "}\n"
        "\n"
        "const people = [\n"
        "  { name: 'Ada', team: 'core' },\n"
        "  { name: 'Bo', team: 'web' },\n"
        "  { name: 'Cy', team: 'core' },\n"
        "];\n"
        "console.log(groupBy(people, p => p.team));\n"
        "```",
    ),
    (
        "code_explain",
        "I found this SQL in an old report script that nobody on the team wrote, and the report "
        "now takes several minutes to run. Describe in plain English what the query computes, "
        "including what the condition inside the JOIN does differently from putting it in the "
        "WHERE clause, and whether departments without staff can appear in the output. Then "
        "point out anything that could make it slow on a large table and suggest indexes.\n\n"
        "```sql\n"
        "SELECT d.name AS department,\n"
        "       COUNT(e.id) AS staff,\n"
        "       ROUND(AVG(e.salary), 0) AS avg_salary\n"
        "FROM departments d\n"
        "LEFT JOIN employees e\n"
        "       ON e.department_id = d.id\n"
        "      AND e.left_on IS NULL\n"
        "WHERE LOWER(d.region) = 'north'\n"
        "GROUP BY d.name\n"
        "HAVING COUNT(e.id) > 3\n"
        "ORDER BY avg_salary DESC;\n"
        "```",
    ),
    # write code
    (
        "code",
        "Write a Python function `parse_duration(text)` that turns strings such as '1h30m', "
        "'45s', '2h' or '3m15s' into a number of seconds. Requirements:\n"
        "- units are h, m and s, each used at most once and in that order;\n"
        "- raise ValueError with a helpful message for anything else, including an empty string;\n"
        "- do not use any third-party package.\n"
        "- accept optional whitespace between the parts, such as '1h 30m';\n"
        "- include type hints and a docstring with two examples.\n"
        "Then write four short pytest tests, including one for invalid input such as '30m1h' or "
        "'10x'. Finally, explain in two sentences why you chose a regular expression or a "
        "hand-written parser for this job, and what the trade-off is.",
    ),
    (
        "code",
        "I have a CSV file of temperature readings with the columns station, timestamp "
        "(ISO 8601) and celsius. Write a Python script using only the standard library that "
        "prints, for each station, the number of readings, the minimum, the maximum and the mean "
        "temperature rounded to one decimal place. Rows with an empty or non-numeric celsius "
        "value should be skipped and counted, and the script should print how many were skipped "
        "at the end. Read the file name from the command line, print a usage message if it is "
        "missing, and sort the stations alphabetically in the output. The file can be large "
        "(several million rows), so do not load it all into memory at once. Here are the first "
        "lines of a sample file:\n\n"
        "station,timestamp,celsius\n"
        "north-pier,2024-01-05T06:00:00Z,3.4\n"
        "airfield,2024-01-05T06:00:00Z,-1.2\n"
        "north-pier,2024-01-05T07:00:00Z,\n"
        "old-town,2024-01-05T06:00:00Z,2.9",
    ),
    (
        "code",
        "Write a small Bash script called backup.sh that:\n"
        "1. takes a source directory and a destination directory as arguments;\n"
        "2. exits with a usage message if either is missing;\n"
        "3. creates a compressed tar archive of the source named with today's date, such as "
        "notes-2024-05-01.tar.gz;\n"
        "4. keeps only the seven newest archives in the destination and deletes older ones;\n"
        "5. prints one line saying what it did.\n"
        "Use `set -euo pipefail` and comment each step briefly. The script will run from cron "
        "every night at 02:30 on a small Debian server, so it must not ask questions, must work "
        "when the destination is on a mounted USB disk, and should exit with a non-zero status "
        "if the disk is not mounted. Show the crontab line too, and explain how the script "
        "decides which archives are the oldest.",
    ),
    # extraction into JSON
    (
        "extract",
        "Read the email and return a JSON object with the keys sender_name, company, "
        "meeting_date, meeting_time, location and topics (an array of strings). Use null for "
        "anything not mentioned.\n\n"
        "Hi Daniel,\n\n"
        "Thanks for your call yesterday. As agreed, I'd like to meet your team on Tuesday 18 June "
        "at 2:30 pm at our office on Kestrel Street, third floor. We would like to cover the new "
        "pricing model, the delivery schedule for the autumn catalogue, and whether you can "
        "support returns from customers in Ireland. Please let me know if anyone else from your "
        "side will attend so I can arrange visitor badges. Parking is limited, so the train to "
        "Millbrook station is probably easier; it is a five-minute walk from there.\n\n"
        "Best regards,\nPriya Raman\nHead of Purchasing, Greenfold Outdoor Ltd",
    ),
    (
        "extract",
        "From the job advertisement below, extract: job_title, employer, city, remote_days_per_week "
        "(a number), salary_min, salary_max, currency and required_skills (an array). Output JSON "
        "only.\n\n"
        "Northwind Analytics is hiring a Data Engineer for its Lisbon office. You will build and "
        "maintain pipelines that move sensor data from 2,000 wind turbines into our warehouse, and "
        "you will work closely with two data scientists and a product owner. We offer a salary of "
        "48,000 to 60,000 EUR per year, a learning budget, and up to two days a week of remote "
        "work. You should be comfortable with Python and SQL, have used Apache Airflow or a "
        "similar scheduler, and know the basics of Docker. Experience with time-series databases "
        "is a plus but not required. Applications close on 30 September.",
    ),
    (
        "extract",
        "Extract every medication mentioned in the note into a JSON array of objects with the "
        "fields name, dose, frequency and reason. If a field is missing, use an empty string.\n\n"
        "Patient note (fictional): Mr. Hale, 67, attended for his routine review. He continues "
        "to take metformin 500 mg twice daily for type 2 diabetes and atorvastatin 20 mg once at "
        "night for cholesterol. He started ibuprofen 200 mg as needed for knee pain last month but "
        "reports mild stomach upset, so we agreed to switch to paracetamol 1 g up to four times a "
        "day instead. Blood pressure was 138/84. He also uses a salbutamol inhaler, two puffs "
        "when needed for breathlessness, mostly in cold weather. Vitamin D 1000 units daily was "
        "stopped in January. Review again in three months, sooner if the stomach upset "
        "continues.",
    ),
    # arithmetic and multi-step word problems
    (
        "math",
        "Solve the problem step by step and give the final answer on its own line.\n\n"
        "A school is organising a trip for 146 students and 12 teachers. Each bus can carry 45 "
        "people and costs $380 to hire for the day. Entrance tickets cost $14 per student, and "
        "teachers get in free. The school has received a grant of $1,000, and the rest of the "
        "cost will be split equally between the students. How many buses are needed, what is the "
        "total cost of the trip, and how much must each student pay, rounded up to the nearest "
        "dollar? Finally, if 10 more students sign up at the last minute, does the school need "
        "another bus, and how does the amount per student change?",
    ),
    (
        "math",
        "A water tank holds 2,400 litres. Pipe A fills it in 6 hours, pipe B fills it in 4 hours, "
        "and a drain C empties a full tank in 8 hours. The tank starts empty. At 08:00 pipes A and "
        "B are opened; at 09:00 someone also opens the drain by mistake, and it stays open. At "
        "what time is the tank full? Show how many litres are in the tank at 09:00 and explain "
        "each rate you use, in litres per hour. Give the final time to the nearest minute. Then "
        "answer a second question: if the drain had never been opened, how many minutes earlier "
        "would the tank have been full? Present the working as a short list of steps, not as a "
        "single paragraph.",
    ),
    (
        "math",
        "Anna invests $5,000 at 4% interest compounded yearly. Ben invests $5,000 at 4.5% simple "
        "interest. Make a small table showing both balances after 1, 5, 10 and 20 years, rounded "
        "to the nearest dollar, and say after how many whole years Anna's balance first exceeds "
        "Ben's. Explain the difference between simple and compound interest in two sentences. "
        "Then consider a twist: Anna must pay a one-off fee of $150 when she opens the account, "
        "taken from the $5,000 at the start. Does that change the year in which she overtakes "
        "Ben, and if so, to which year? Show the calculation for the years around the crossover, "
        "and state any rounding you did.",
    ),
    # factual Q&A with a longer brief
    (
        "qa",
        "I'm preparing a short talk for a community group about how vaccines work. Please answer "
        "the following questions, each in two or three sentences, in simple language:\n"
        "1. What does the immune system do when it meets a germ for the first time?\n"
        "2. How does a vaccine 'train' the immune system without causing the disease?\n"
        "3. Why are some vaccines given in more than one dose?\n"
        "4. What is herd immunity, and why does it protect people who cannot be vaccinated?\n"
        "5. Why do we need a new flu vaccine most years?\n"
        "6. What are common side effects, such as a sore arm, and why do they happen?\n"
        "The audience is mostly retired people, some of whom are worried about vaccines, so "
        "please be respectful and avoid sounding like a lecture.",
    ),
    (
        "qa",
        "My grandmother remembers using a slide rule at work in the 1960s. Explain how a slide rule "
        "multiplies two numbers, why logarithms make that possible, what kinds of calculations "
        "engineers used it for, and why pocket calculators replaced it within about a decade. A "
        "few paragraphs are fine; please avoid heavy formulas. She also mentioned that her "
        "colleagues had to keep track of the decimal point themselves, and that there were "
        "special scales for squares, sines and cube roots. Could you explain what keeping track "
        "of the decimal point means with a worked example, such as multiplying 2.5 by 38, and "
        "say roughly how many significant figures a typical 25 cm slide rule gave? Finally, are "
        "slide rules still used or taught anywhere today, for example by pilots?",
    ),
    # translation of longer passages
    (
        "translate",
        "Translate the following French text into natural English. Keep the paragraph break.\n\n"
        "Chaque été, le petit village de Saint-Aubin accueille un marché nocturne sur la place de "
        "l'église. Les producteurs locaux y vendent du fromage, du miel et des fruits, tandis que "
        "des musiciens jouent jusqu'à minuit. Les enfants adorent le manège en bois, qui date de "
        "1920 et qui fonctionne encore grâce à un groupe de bénévoles passionnés.\n\n"
        "Cette année, la mairie a décidé d'interdire les voitures dans le centre pendant le "
        "marché. Certains commerçants craignaient une baisse de fréquentation, mais le premier "
        "soir, il y avait plus de visiteurs que jamais, venus à pied ou à vélo.",
    ),
    (
        "translate",
        "Traduce al inglés el siguiente texto y luego explica en una frase, en inglés, qué "
        "expresión fue la más difícil de traducir.\n\n"
        "Mi abuelo tenía una pequeña ferretería en el barrio desde 1972. Allí se podía encontrar "
        "de todo: tornillos de todos los tamaños, pintura, cuerdas, y hasta semillas para el "
        "huerto. Cuando alguien entraba sin saber exactamente qué necesitaba, mi abuelo le hacía "
        "tres o cuatro preguntas y, como por arte de magia, sacaba la pieza justa de algún cajón. "
        "Los vecinos decían que tenía más memoria que un ordenador. Cerró la tienda al jubilarse, "
        "pero todavía hoy la gente lo para por la calle para pedirle consejo.",
    ),
    (
        "translate",
        "请将下面这段中文翻译成英文，语言要自然流畅。\n\n"
        "去年秋天，我们全家去了云南旅行。我们先在昆明待了两天，参观了滇池和翠湖公园，然后坐火车去了大理。"
        "大理古城的街道很干净，到处都是卖手工艺品和小吃的店铺。我们租了自行车，沿着洱海骑了整整一个下午，"
        "风景非常美丽。最后一站是丽江，那里的雪山让我们印象最深。虽然旅途有点累，但是每个人都说这是最难忘的一次旅行。",
    ),
    # rewriting
    (
        "rewrite",
        "Rewrite this customer-service reply so that it is warmer, clearer and shorter (at most 90 "
        "words), without promising anything new. The customer, Mrs. Adeyemi, wrote to us twice "
        "already and is upset; she ordered a birthday present for her son that has not arrived. "
        "Address her by name and keep the facts exactly as they are.\n\n"
        "Dear customer, we acknowledge receipt of your complaint regarding order number 55812. "
        "Please be advised that according to our records the item was dispatched within the "
        "stated timeframe and any delay is attributable to the courier. We are not in a position "
        "to issue a refund at this time. However, should the parcel not arrive within ten working "
        "days of the original dispatch date, you may contact us again and we will open an "
        "investigation with the courier, after which a replacement or refund may be considered "
        "in accordance with our terms and conditions.",
    ),
    (
        "rewrite",
        "Rewrite the paragraph below for a children's science magazine (readers aged 8 to 10). "
        "Keep all the facts, use short sentences, and add one fun comparison.\n\n"
        "Honeybees communicate the location of food sources through a behaviour known as the "
        "waggle dance. A forager returning to the hive moves in a figure-eight pattern, and the "
        "angle of the straight 'waggle' portion relative to vertical indicates the direction of "
        "the food relative to the sun. The duration of the waggle run corresponds to the distance: "
        "roughly one second of waggling represents about one kilometre of flight. Other workers "
        "follow the dancer closely, learn the route, and then fly out to the flowers themselves. "
        "Researchers have shown that bees can even adjust the dance as the sun moves across the "
        "sky during the day, so the information stays correct for the bees who follow it later.",
    ),
    # classification of several items
    (
        "classify",
        "Classify each support ticket into exactly one category: billing, bug, feature_request, "
        "account_access or other. Answer as a JSON object mapping ticket number to category.\n\n"
        "1. 'I was charged twice for my March subscription.'\n"
        "2. 'The export button does nothing when I click it in Firefox.'\n"
        "3. 'It would be great if I could tag transactions with colours.'\n"
        "4. 'I changed my phone and now the two-factor code never arrives.'\n"
        "5. 'Do you have an office in Singapore?'\n"
        "6. 'After the update, the app crashes whenever I open the calendar.'\n"
        "7. 'Please add a way to split one payment across two categories.'\n"
        "8. 'My card expired; how do I update it before the next invoice?'",
    ),
    (
        "classify",
        "For each headline, give the topic (politics, sport, science, business, culture) and the "
        "tone (neutral, positive, negative). Use a markdown table.\n\n"
        "- 'Local team wins first championship in forty years'\n"
        "- 'Parliament delays vote on housing bill again'\n"
        "- 'Telescope spots water vapour on distant planet'\n"
        "- 'Factory closure puts 300 jobs at risk'\n"
        "- 'Museum reopens with record crowds after renovation'\n"
        "- 'Central bank holds interest rates steady'\n"
        "- 'Star striker out for season with knee injury'\n"
        "- 'New vaccine trial shows promising early results'\n"
        "- 'Author's debut novel tops bestseller list'\n"
        "- 'Protesters gather outside city hall over bus fares'\n"
        "If a headline fits two topics, choose the main one and add a short note below the "
        "table explaining your choice.",
    ),
]
